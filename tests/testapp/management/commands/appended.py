import datetime
import os
import time

from jobclaims import JobCommand


def _seconds(name: str, default: str = "0") -> float:
    return float(os.environ.get(name, default))


def append(line: str) -> None:
    """One line, written whole at the end of the log whoever else writes to it."""
    fd = os.open(os.environ["APPENDED_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


class Command(JobCommand):
    """A job each test shapes through the environment of the hosts it starts
    (APPENDED_SCHEDULE, _LEASE, _MISFIRE, _SETUP, _HOLD; unset, it has no
    schedule), which appends a line to the file APPENDED_LOG as each run
    starts and as it ends: runs are counted from the job's own writes, a run
    killed midway included."""

    help = "Test job: append a line to a log as each run starts and as it ends."
    schedule = os.environ.get("APPENDED_SCHEDULE") or None
    lease = datetime.timedelta(seconds=_seconds("APPENDED_LEASE", "10"))
    misfire = os.environ.get("APPENDED_MISFIRE", "latest")

    def handle(self, *args, **options):
        # A process that sets itself up this long before its run, as a job
        # with heavy imports does.
        time.sleep(_seconds("APPENDED_SETUP"))
        super().handle(*args, **options)

    def run_job(self, run, *args, **options):
        append(f"start {run.window} {os.getpid()}")
        time.sleep(_seconds("APPENDED_HOLD"))
        append(f"end {run.window} {os.getpid()}")
