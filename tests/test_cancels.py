"""Cancelling a running run from another process: it stops, its writes are refused."""

from __future__ import annotations

import datetime
import getpass
import time

import pytest

from jobclaims.models import JobRun
from jobclaims.testing import start
from tests.helpers import is_gone, run_command, states_of, wait_until
from tests.test_timeouts import started_pid
from tests.testapp.management.commands import stubborn
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)


def fenced_writes() -> int:
    return Charge.objects.filter(job="stubborn", step=stubborn.FENCED).count()


def writing() -> bool:
    return fenced_writes() > 0


def cancel_and_time_the_stop() -> tuple[float, int]:
    """Cancel the stubborn run once it writes; return how long its process
    took to end after the cancel returned, and its fenced writes by then."""
    wait_until(writing, "the run to write under its claim")
    pid = started_pid()
    out, err, status = run_command("jobclaims_cancel", "stubborn")
    cancelled_at = time.monotonic()
    committed = fenced_writes()
    assert (out, err, status) == (
        "Cancelled 1 run of stubborn: each one's process is told and stops.\n",
        "",
        0,
    )
    wait_until(lambda: is_gone(pid), "the run's process to end", timeout=30)
    return time.monotonic() - cancelled_at, committed


def assert_cancelled_and_fenced(committed: int) -> None:
    run = JobRun.objects.get(job="stubborn")
    assert run.status == JobRun.Status.CANCELLED
    assert run.cancelled_by == getpass.getuser()
    assert run.cancelled_at is not None
    assert run.failures == 0  # Not a failure.
    assert states_of("stubborn") == {run.window: "cancelled"}
    # No fenced write committed after the cancel did; the one tried on the
    # way out was refused.
    assert fenced_writes() == committed
    assert Charge.objects.filter(job="stubborn", step=stubborn.REFUSED).exists()


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_cancel_from_another_process_stops_the_schedulers_child_within_a_second():
    # Fails without the scheduler's watch: the child runs on, under no claim.
    [host] = start(
        "jobclaims_scheduler",
        *("--once", "--job", "stubborn"),
        env={"STUBBORN_SCHEDULE": "* * * * *"},
    )
    try:
        took, committed = cancel_and_time_the_stop()
        result = host.finish(timeout=30)
    finally:
        host.stop()
    assert took < 1.0, took
    assert result.returncode == 0, result
    assert "Cancelled stubborn" in result.stderr + result.stdout
    assert_cancelled_and_fenced(committed)


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_run_started_directly_learns_of_its_cancel_at_its_next_renewal_and_stops():
    # A 1.5 s lease is renewed every half second.
    [instance] = start("stubborn", env={"STUBBORN_LEASE": "1.5"})
    try:
        took, committed = cancel_and_time_the_stop()
        result = instance.finish(timeout=30)
    finally:
        instance.stop()
    assert took < 1.5, took
    assert result.returncode == 1, result
    assert f"was cancelled by {getpass.getuser()} at " in result.stderr
    assert_cancelled_and_fenced(committed)


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_run_that_ignores_the_cancels_sigterm_is_killed_after_its_grace():
    [instance] = start(
        "stubborn",
        env={"STUBBORN_LEASE": "1.5", "STUBBORN_GRACE": "1", "STUBBORN_IGNORES_SIGTERM": "1"},
    )
    try:
        took, committed = cancel_and_time_the_stop()
        result = instance.finish(timeout=30)
    finally:
        instance.stop()
    assert 1.0 <= took < 2.5, took
    assert result.returncode == -9, result
    run = JobRun.objects.get(job="stubborn")
    assert run.status == JobRun.Status.CANCELLED
    assert fenced_writes() == committed


def test_cancelling_a_job_never_claimed_names_the_jobs_that_exist():
    JobRun.objects.claim("nightly", "2026-12-02", lease=datetime.timedelta(minutes=1))
    _, err, status = run_command("jobclaims_cancel", "nighty")
    assert (status, err) == (1, "no claim of job 'nighty' exists; known jobs: nightly")


def test_cancelling_a_job_with_no_running_run_changes_nothing_and_says_so():
    run = JobRun.objects.claim("nightly", "2026-12-02", lease=datetime.timedelta(minutes=1))
    assert run is not None
    assert run.release()
    out, _, status = run_command("jobclaims_cancel", "nightly", "--window", "2026-12-02")
    assert (out, status) == ("nightly has no running run; nothing was cancelled.\n", 0)
    assert JobRun.objects.get().status == JobRun.Status.SUCCEEDED


def test_a_cancelled_fire_waiting_for_its_retry_is_not_retried():
    run = JobRun.objects.claim("nightly", "2026-12-02", lease=datetime.timedelta(minutes=1))
    assert run is not None
    JobRun.objects.filter(pk=run.pk).update(status=JobRun.Status.RETRYING, retry_at=run.claimed_at)
    assert JobRun.objects.due_retries().exists()
    run_command("jobclaims_cancel", "nightly")
    assert not JobRun.objects.due_retries().exists()
    assert JobRun.objects.get().status == JobRun.Status.CANCELLED
