"""A job's hard timeout, with real processes: under a scheduler and started directly."""

from __future__ import annotations

import datetime
import os

import pytest

from jobclaims import attempts, schedules
from jobclaims.attempts import RetryPolicy
from jobclaims.commands import TIMED_OUT_STATUS
from jobclaims.models import JobRun
from jobclaims.testing import start
from tests.helpers import is_gone, run_command, states_of
from tests.testapp.management.commands import stubborn
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT, GRACE = "1.5", "1"
#: A stubborn job timed out quickly; every minute's fire, for a --once.
TIMED = {
    "STUBBORN_SCHEDULE": "* * * * *",
    "STUBBORN_TIMEOUT": TIMEOUT,
    "STUBBORN_GRACE": GRACE,
}
IGNORING = {**TIMED, "STUBBORN_IGNORES_SIGTERM": "1"}
#: Under a scheduler the timeout counts from the job's process start, which
#: takes a second or more on a loaded machine: the job's own handling of
#: SIGTERM is in place well before a timeout this long.
SCHEDULED_TIMEOUT = 5
SCHEDULED = {**TIMED, "STUBBORN_TIMEOUT": str(SCHEDULED_TIMEOUT)}


def the_run() -> JobRun:
    return JobRun.objects.get(job="stubborn")


def started_pid() -> int:
    """The process of the stubborn job's run."""
    return Charge.objects.get(job="stubborn", step=stubborn.STARTED).pid


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_that_ignores_sigterm_is_killed_by_its_scheduler_and_recorded_timed_out():
    # Fails without the timeout: the job never ends, and --once never returns.
    env = {**SCHEDULED, "STUBBORN_IGNORES_SIGTERM": "1"}
    [host] = start("jobclaims_scheduler", "--once", "--job", "stubborn", env=env)
    result = host.finish(timeout=60)
    assert result.returncode == 0, result
    assert "sent pid" in result.stderr + result.stdout
    assert "SIGKILL" in result.stderr + result.stdout
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    assert run.error.startswith(
        "Timed out after 0:00:05: its scheduler sent it SIGTERM at its timeout, "
        "and killed it (SIGKILL) 0:00:01 later"
    ), run.error
    assert run.failures == 1  # A failure for the retry policy.
    assert run.finished_at is not None
    took = (run.finished_at - run.claimed_at).total_seconds()
    assert SCHEDULED_TIMEOUT + float(GRACE) <= took < SCHEDULED_TIMEOUT + 10, took
    assert is_gone(started_pid())


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_that_heeds_the_sigterm_at_its_timeout_is_recorded_timed_out_with_its_traceback():
    # A grace long enough that only the job's own exit ends it before the SIGKILL.
    long_grace = 10
    env = {**SCHEDULED, "STUBBORN_GRACE": str(long_grace)}
    [host] = start("jobclaims_scheduler", "--once", "--job", "stubborn", env=env)
    result = host.finish(timeout=60)
    assert result.returncode == 0, result
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    head, _, traceback = run.error.partition("\n\n")
    assert head == "Timed out after 0:00:05: its scheduler sent it SIGTERM."
    assert "interrupted by SIGTERM" in traceback
    took = (run.finished_at - run.claimed_at).total_seconds()  # type: ignore[operator]
    assert SCHEDULED_TIMEOUT <= took < SCHEDULED_TIMEOUT + long_grace, took


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_started_directly_that_ignores_sigterm_kills_itself_and_is_recorded_timed_out():
    # Fails without the watchdog: the process ignores its own SIGTERM and runs on.
    [instance] = start("stubborn", env=IGNORING)
    result = instance.finish(timeout=30)
    assert result.returncode == -9, result
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    assert run.error.startswith(
        "Timed out after 0:00:01.500000: its own process sent it SIGTERM at its timeout"
    ), run.error
    assert states_of("stubborn") == {run.window: "timed-out"}


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_started_directly_stops_at_its_timeout_and_exits_as_timeout_does():
    [instance] = start("stubborn", env=TIMED)
    result = instance.finish(timeout=30)
    assert result.returncode == TIMED_OUT_STATUS, result
    assert "was stopped at its timeout of 0:00:01.500000" in result.stderr
    assert "recorded timed out" in result.stderr
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    assert run.error.startswith("jobclaims.exceptions.JobTimedOut: stopped at its timeout")
    # Its last fenced write, on its way out, still held the claim.
    assert Charge.objects.filter(step=stubborn.REFUSED).count() == 0


@pytest.mark.parametrize(
    "timeout",
    [datetime.timedelta(), datetime.timedelta(seconds=-1), 30, "0:30:00"],
    ids=["zero", "negative", "a number", "a string"],
)
def test_a_timeout_that_is_not_a_positive_timedelta_is_refused_naming_the_fix(monkeypatch, timeout):
    monkeypatch.setattr(stubborn.Command, "timeout", timeout)
    _out, err, status = run_command("stubborn")
    assert status == 1
    assert err == (
        "stubborn: timeout must be a positive datetime.timedelta, or None for no timeout, "
        f"not {timeout!r}"
    )
    assert not JobRun.objects.exists()
    monkeypatch.setattr(stubborn.Command, "schedule", "* * * * *")
    assert schedules.problems(stubborn.Command) == [
        "stubborn: timeout must be a positive datetime.timedelta, or None for no timeout, "
        f"not {timeout!r}"
    ]


def test_a_negative_grace_is_refused_naming_the_fix(monkeypatch):
    monkeypatch.setattr(stubborn.Command, "timeout_grace", datetime.timedelta(seconds=-1))
    _, err, status = run_command("stubborn")
    assert (status, err) == (
        1,
        "stubborn: timeout_grace must be a datetime.timedelta of 0 or more, not "
        "datetime.timedelta(days=-1, seconds=86399)",
    )


def test_a_timeout_counts_against_the_retries_like_a_failure():
    run = JobRun.objects.claim("stubborn", "2026-12-02T05:00", lease=datetime.timedelta(minutes=1))
    assert run is not None
    policy = RetryPolicy(retries=1, backoff=datetime.timedelta())
    assert attempts.after_timeout(run, policy, "Timed out.") == JobRun.Status.RETRYING
    retry = JobRun.objects.claim(run.job, run.window, lease=datetime.timedelta(minutes=1))
    assert retry is not None
    assert attempts.after_timeout(retry, policy, "Timed out.") == JobRun.Status.TIMED_OUT
    assert JobRun.objects.get().failures == 2


def test_the_job_is_not_scheduled_unless_a_test_says_so():
    assert "STUBBORN_SCHEDULE" not in os.environ
    assert stubborn.Command.schedule is None
