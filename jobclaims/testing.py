"""Race real instances of a management command, to prove a job runs once.

``race("charge_invoices", instances=2)`` starts two OS processes of the
command against the database this process uses (in a test, the test
database), holds them at a barrier until both are connected and ready, then
releases them at the same instant and returns what each did.

In pytest, the ``race_command`` fixture (from the plugin this package
installs) is ``race`` with a transactional database; in Django's own test
runner, subclass ``RaceTestCase``. Either way the test database must take
committed data and, for SQLite, be a file other processes can open.

A test that starts a process of its own points it at the test databases
with ``child_environment()`` (in the parent) and ``connect_child()`` (in the
child), from ``jobclaims.running.children``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Literal

from django.test import TransactionTestCase

from jobclaims import signals
from jobclaims.running.children import child_environment, connect_child

_START_VARIABLE = "JOBCLAIMS_RACE_START_FD"
_REPORT_VARIABLE = "JOBCLAIMS_RACE_REPORT_FD"
_READY = "jobclaims: ready"


@dataclass(frozen=True)
class InstanceResult:
    """What one instance of the command did."""

    returncode: int
    stdout: str
    stderr: str
    #: What the instance's claims did, in order: "claimed" or "skipped" for
    #: each, as its claim signals reported them (not its output).
    claims: tuple[str, ...] = ()

    @property
    def outcome(self) -> Literal["ran", "skipped", "failed"]:
        """Told by the exit status and the claims: "skipped" when every claim
        the instance tried was refused, whatever it printed and at any
        verbosity. A command that claims nothing "ran"."""
        if self.returncode != 0:
            return "failed"
        if self.claims and "claimed" not in self.claims:
            return "skipped"
        return "ran"


class StartingLine:
    """A pipe that instances wait on; closing it releases them all at once."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()

    def release(self) -> None:
        for fd in (self._write_fd, self.read_fd):
            with contextlib.suppress(OSError):  # Already released.
                os.close(fd)


class Instance:
    """One OS process of a management command, held at a starting line."""

    def __init__(
        self,
        command: str,
        *args: str,
        line: StartingLine,
        env: dict[str, str] | None = None,
    ):
        # The instance reports its claims on a pipe of their own: its output
        # is the command's.
        self._reports, report_fd = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jobclaims.testing", command, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                pass_fds=[line.read_fd, report_fd],
                env={
                    **os.environ,
                    **child_environment(),
                    _START_VARIABLE: str(line.read_fd),
                    _REPORT_VARIABLE: str(report_fd),
                    **(env or {}),
                },
            )
        finally:
            os.close(report_fd)

    def wait_ready(self) -> None:
        """Block until the process has set Django up and connected."""
        assert self.process.stdout is not None, "started with stdout=PIPE"
        line = self.process.stdout.readline().rstrip("\n")
        if line != _READY:
            self.process.kill()
            _, stderr = self.process.communicate()
            raise RuntimeError(f"the instance did not start:\n{line}\n{stderr}")

    def finish(self, timeout: float = 60) -> InstanceResult:
        stdout, stderr = self.process.communicate(timeout=timeout)
        # The process has exited, so its end of the pipe is closed: this
        # reads to the end of a few short lines.
        with open(self._reports, closefd=False) as reports:
            claims = tuple(reports.read().split())
        return InstanceResult(self.process.returncode, stdout, stderr, claims)

    def stop(self) -> None:
        """Kill the process if it is still running, and close its report pipe."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()
        with contextlib.suppress(OSError):  # Closed already.
            os.close(self._reports)


def start(
    command: str, *args: str, instances: int = 1, env: dict[str, str] | None = None
) -> list[Instance]:
    """Start processes of ``command``, all released together once all are ready."""
    line = StartingLine()
    group = [Instance(command, *args, line=line, env=env) for _ in range(instances)]
    try:
        for instance in group:
            instance.wait_ready()
    except BaseException:
        for instance in group:
            instance.stop()
        raise
    finally:
        line.release()
    return group


def race(
    command: str,
    *args: str,
    instances: int = 2,
    timeout: float = 60,
    env: dict[str, str] | None = None,
) -> list[InstanceResult]:
    """Run ``instances`` processes of ``command`` released at the same instant."""
    group = start(command, *args, instances=instances, env=env)
    try:
        return [instance.finish(timeout) for instance in group]
    finally:
        for instance in group:
            instance.stop()


def assert_ran_once(results: list[InstanceResult]) -> None:
    """Fail, showing what every instance printed, unless exactly one ran."""
    ran = [result for result in results if result.outcome == "ran"]
    if len(ran) != 1 or any(result.outcome == "failed" for result in results):
        report = "\n".join(
            f"instance {number} {result.outcome} (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
            for number, result in enumerate(results, start=1)
        )
        raise AssertionError(
            f"{len(ran)} of {len(results)} instances ran; expected exactly 1:\n{report}"
        )


def schedules_in_force_since(ago: datetime.timedelta) -> None:
    """Record every scheduled job's schedule as in force since ``ago`` before
    now, by the database clock.

    The scheduler runs only fires due while a schedule was in force, and a
    test database starts with none recorded: without this, a test's first
    scheduler would count today's fire as from before its deploy, and leave
    it out.
    """
    # Imported here: pytest loads this module before Django's apps are ready.
    from jobclaims.jobs.discovery import scheduled_jobs
    from jobclaims.models import ScheduleVersion
    from jobclaims.scheduling.schedule_versions import fingerprint_of
    from jobclaims.time.clock import database_now

    for job in scheduled_jobs():
        ScheduleVersion.objects.get_or_create(
            job=job.job, fingerprint=fingerprint_of(job), defaults={"schedule": job.cron.expression}
        )
    ScheduleVersion.objects.update(since=database_now() - ago)


class RaceTestCase(TransactionTestCase):
    """A TransactionTestCase whose tests race real instances of a command.

    A transaction test case, because the instances are other processes: they
    only see data this test has committed.
    """

    @staticmethod
    def race(command: str, *args: str, instances: int = 2, **kwargs: Any) -> list[InstanceResult]:
        return race(command, *args, instances=instances, **kwargs)

    def assertRanOnce(self, results: list[InstanceResult]) -> None:
        assert_ran_once(results)


def _run_instance(argv: list[str]) -> None:
    """The child's side: set up, report ready, wait for the start, run."""
    from django.core.management import ManagementUtility

    connect_child()
    _report_claims(int(os.environ[_REPORT_VARIABLE]))
    print(_READY, flush=True)
    # Blocks until the parent closes its end: every instance wakes at once.
    os.read(int(os.environ[_START_VARIABLE]), 1)
    ManagementUtility(["manage.py", *argv]).execute()


def _report_claims(fd: int) -> None:
    """Write "claimed" or "skipped" to ``fd`` as each claim of this process settles."""

    def claimed(**kwargs: Any) -> None:
        os.write(fd, b"claimed\n")

    def skipped(**kwargs: Any) -> None:
        os.write(fd, b"skipped\n")

    signals.claim_acquired.connect(claimed, weak=False)
    signals.claim_skipped.connect(skipped, weak=False)


if __name__ == "__main__":
    _run_instance(sys.argv[1:])
