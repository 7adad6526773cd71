import datetime
import json
import os
import sys
import time

from jobclaims import JobCommand

#: The process that imported this module: a forked job's is its fork server.
LOADED_BY = os.getpid()


def _in_fork_server() -> bool:
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == "jobclaims.scheduling.fork_server"


def _held_after_fork(side: str) -> None:
    """A fork server slow on one side of a fork, as on a loaded host:
    PROBE_FORK_HOLD_<SIDE> (seconds), announced by a line in PROBE_FILE."""
    if _in_fork_server() and (hold := os.environ.get(f"PROBE_FORK_HOLD_{side.upper()}")):
        with open(os.environ["PROBE_FILE"], "a") as file:
            file.write(json.dumps({"held": side, "pid": os.getpid()}) + "\n")
        time.sleep(float(hold))


def _held_while_loaded() -> None:
    """A fork server slow to load its jobs, as on a loaded host:
    PROBE_LOAD_HOLD (seconds), announced by a line in PROBE_FILE."""
    if _in_fork_server() and (hold := os.environ.get("PROBE_LOAD_HOLD")):
        with open(os.environ["PROBE_FILE"], "a") as file:
            file.write(json.dumps({"loading": os.getpid()}) + "\n")
        time.sleep(float(hold))


_held_while_loaded()
os.register_at_fork(
    after_in_parent=lambda: _held_after_fork("parent"),
    after_in_child=lambda: _held_after_fork("child"),
)


class Command(JobCommand):
    """Appends how its process was started to PROBE_FILE, one JSON line per run.

    Set by the environment, so that other tests' schedulers never see it:
    PROBE_SCHEDULE (unset: no schedule), PROBE_FRESH (set: a fresh
    interpreter per fire), PROBE_HOLD (seconds each run lasts),
    PROBE_FORK_HOLD_PARENT and _CHILD (seconds its fork server's side of
    each fork, or the child's, is held up right after it), PROBE_LOAD_HOLD
    (seconds its fork server takes to load it) and PROBE_LEASE (seconds).
    """

    help = "Test job: record how its process was started."
    schedule = os.environ.get("PROBE_SCHEDULE") or None
    fresh_interpreter = bool(os.environ.get("PROBE_FRESH"))
    allow_overlap = True
    lease = datetime.timedelta(seconds=float(os.environ.get("PROBE_LEASE", "3600")))

    def run_job(self, run, *args, **options):
        started = {
            "window": run.window,
            "pid": os.getpid(),
            "at": time.time(),
            "loaded_by": LOADED_BY,
            "parent": os.getppid(),
            "session": os.getsid(0),
            "stdin": os.path.realpath("/proc/self/fd/0"),
            "cpu": time.process_time(),
            "variable": os.environ.get("PROBE_VARIABLE"),
            "argv": sys.argv,
        }
        with open(os.environ["PROBE_FILE"], "a") as file:
            file.write(json.dumps(started) + "\n")
        time.sleep(float(os.environ.get("PROBE_HOLD", "0")))
