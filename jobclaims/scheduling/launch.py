"""How the scheduler and the admin's "Run now" start a won fire's job: its
own process, under the claim the parent won.

The child runs ``django-admin <job>`` with the schedule's arguments, the
fire's window and the claim's token (``command_line()``); it adopts the
claim (``jobclaims.running.children.adopt()``) on the parent's very
databases (``job_environment()``). The scheduler forks it from its fork
server (``Launcher``), unless the job asks for a fresh interpreter; the
admin starts a fresh interpreter (``start_detached()``): a web server's
request has no fork server, and starts one job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from jobclaims.running.children import passed_on
from jobclaims.scheduling.forking import ANSWER_TIMEOUT, ForkServer, ForkServerGone, can_fork

if TYPE_CHECKING:
    from jobclaims.jobs.schedules import JobSchedule
    from jobclaims.models import JobRun


class JobProcess(Protocol):
    """A job's process as the scheduler watches it: a ``subprocess.Popen``,
    or a ``ForkedProcess``."""

    pid: int

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int, /) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def command_line(job: JobSchedule, key: str, run: JobRun, verbosity: int = 1) -> list[str]:
    """A won fire's command: the job's, with its schedule's arguments, under its claim."""
    # One argument, "=" and all: a name like "--dry-run" is no option of its own.
    named = [f"--schedule-name={job.name}"] if job.name else []
    return [
        job.command,
        *job.args,
        *named,
        "--window",
        key,
        "--claim-token",
        str(run.token),
        # The scheduler ran them as it started; each fire need not again.
        "--skip-checks",
        f"--verbosity={verbosity}",
    ]


def job_argv(job: JobSchedule, key: str, run: JobRun, verbosity: int = 1) -> list[str]:
    """A won fire's job in a fresh interpreter: ``python -m django <command> ...``."""
    return [sys.executable, "-m", "django", *command_line(job, key, run, verbosity)]


def job_environment() -> dict[str, str]:
    """The environment of a job the scheduler starts: its own, and what it
    passes on (the job claims nothing: it adopts the scheduler's claim)."""
    return {**os.environ, **passed_on()}


def start_detached(job: JobSchedule, run: JobRun, verbosity: int = 1) -> subprocess.Popen[bytes]:
    """Start ``job``'s process under ``run`` for a parent that does not watch it.

    The admin's "Run now" claims in its request and returns at once: the
    job runs in its own process, in its own session (a web server's signals
    are not the job's), and a thread reaps it when it ends. Its heartbeat
    renews the claim, learns of a cancel and records the outcome, as for any
    run started without a scheduler. Raises ``OSError`` when it cannot start.
    """
    process = subprocess.Popen(
        job_argv(job, run.window, run, verbosity),
        stdin=subprocess.DEVNULL,
        env=job_environment(),
        start_new_session=True,
    )
    threading.Thread(target=process.wait, name=f"reap {run}", daemon=True).start()
    return process


class Launcher:
    """Starts a scheduler's won fires: each forked from its fork server
    (``jobclaims.scheduling.forking``), or in a fresh interpreter where
    the job sets ``fresh_interpreter`` or the platform cannot fork one.

    The server loads the jobs once, started when the scheduler starts (or,
    under ``--once``, at its first start: a ``--once`` with nothing due
    starts none). A server that stops answering is not started again: the
    scheduler warns once and starts fresh interpreters from then on.
    """

    def __init__(self, jobs: list[JobSchedule], warn: Callable[[str], None]):
        self.warn = warn
        #: The commands a server loads: those whose fires it forks.
        self.commands = _forked_commands(jobs)
        self.server: ForkServer | None = None
        self.forks = can_fork()

    def use(self, jobs: list[JobSchedule]) -> None:
        """Start the fork server now if ``jobs`` (the stored schedules
        changed) fork one and none is started: it loads while the next
        fires come due, rather than hold up the first of them."""
        if self.server is None:
            self.commands = _forked_commands(jobs)
            self.open()

    def open(self) -> None:
        """Start the fork server, if any job's fires are forked."""
        if self.forks and self.commands and self.server is None:
            self.server = ForkServer.started(self.commands, job_environment())

    def start(self, job: JobSchedule, run: JobRun, verbosity: int) -> JobProcess:
        """Start ``job``'s process under ``run``. Raises ``OSError`` when
        it cannot start.

        A job whose command the server did not load (a stored schedule
        added since) is forked all the same: its process imports its
        module, the rest is loaded already.

        A server still loading is waited for half of what is left of the
        run's claim at most (``_load_wait()``); past that, the fire starts
        in a fresh interpreter, and later fires fork once it has loaded.
        Until the job's process starts, nothing renews the claim: a start
        that waited out a slow load would let another host take it over."""
        if self.forks and not job.fresh_interpreter:
            if self.server is None:
                self.server = ForkServer.started(self.commands, job_environment())
            try:
                if self.server.wait_ready(_load_wait(run)):
                    return self.server.start(
                        command_line(job, run.window, run, verbosity), job_environment()
                    )
                self.warn(
                    f"The fork server is still loading the jobs: {run.job} {run.window} "
                    "starts in a fresh interpreter"
                )
            except ForkServerGone as error:
                self.forks = False
                self.warn(f"{error}: from now on each job starts in a fresh interpreter")
        return subprocess.Popen(
            job_argv(job, run.window, run, verbosity),
            stdin=subprocess.DEVNULL,
            env=job_environment(),
            # The scheduler's own signals reach the job once, passed on.
            start_new_session=True,
        )

    def close(self) -> None:
        """Let the fork server go, once every job it forked has ended."""
        if self.server is not None:
            self.server.close()
            self.server = None


def _load_wait(run: JobRun) -> float:
    """How long a start may wait for the fork server to load: half of what
    is left of ``run``'s claim, as this host surely holds it."""
    return ANSWER_TIMEOUT if run.held_until is None else run.held_for() / 2


def _forked_commands(jobs: list[JobSchedule]) -> list[str]:
    return sorted({job.command for job in jobs if job.task is None and not job.fresh_interpreter})
