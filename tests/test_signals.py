"""Signals and log records as claims are taken, refused, taken over and finished."""

from __future__ import annotations

import datetime
import logging

import pytest

from jobclaims import signals
from jobclaims.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = datetime.timedelta(minutes=5)


@pytest.fixture
def received():
    """Every jobclaims signal sent during the test, as (name, kwargs)."""
    seen: list[tuple[str, dict]] = []
    receivers = {}
    for name in ("claim_acquired", "claim_taken_over", "claim_skipped", "run_finished"):

        def receiver(sender, signal, name=name, **kwargs):
            assert sender is JobRun
            seen.append((name, kwargs))

        receivers[name] = receiver
        getattr(signals, name).connect(receiver)
    yield seen
    for name, receiver in receivers.items():
        getattr(signals, name).disconnect(receiver)


def test_a_claim_its_skip_and_its_outcome_are_signalled(received):
    run = JobRun.objects.claim("charge", "w", lease=LEASE)
    assert run is not None
    JobRun.objects.claim("charge", "w", lease=LEASE)
    run.release()
    JobRun.objects.claim("charge", "w", lease=LEASE)
    names = [name for name, _ in received]
    assert names == ["claim_acquired", "claim_skipped", "run_finished", "claim_skipped"]
    assert received[0][1] == {"run": run}
    assert received[1][1] == {"job": "charge", "window": "w", "reason": "held"}
    finished = received[2][1]
    assert finished["status"] == "succeeded"
    assert run.finished_at is not None
    assert finished["duration"] == run.finished_at - run.claimed_at
    assert received[3][1]["reason"] == "succeeded"


def test_a_takeover_is_signalled_with_the_status_it_replaced(received):
    crashed = JobRun.objects.claim("charge", "w", lease=LEASE)
    assert crashed is not None
    JobRun.objects.filter(pk=crashed.pk).expire()
    successor = JobRun.objects.claim("charge", "w", lease=LEASE)
    assert received[-1] == ("claim_taken_over", {"run": successor, "previous_status": "running"})


def test_a_skip_for_another_windows_run_says_overlap(received):
    JobRun.objects.claim("charge", "08:00", lease=LEASE)
    JobRun.objects.claim("charge", "09:00", lease=LEASE)
    assert received[-1] == (
        "claim_skipped",
        {"job": "charge", "window": "09:00", "reason": "overlap"},
    )


def test_log_records_carry_job_window_owner_and_attempt(caplog):
    with caplog.at_level(logging.INFO, logger="jobclaims"):
        run = JobRun.objects.claim("charge", "w", lease=LEASE)
        assert run is not None
        JobRun.objects.claim("charge", "w", lease=LEASE)
        run.release(JobRun.Status.FAILED, error="boom")
    claimed, skipped, finished = caplog.records
    assert (claimed.job, claimed.window, claimed.owner, claimed.attempt) == (
        "charge",
        "w",
        run.owner,
        1,
    )
    assert (skipped.levelno, skipped.reason) == (logging.INFO, "held")
    assert (finished.status, finished.getMessage().split(":")[0]) == ("failed", "Finished charge w")
    assert all(record.levelno < logging.WARNING for record in caplog.records)


def test_a_host_clock_far_from_the_database_is_warned_about(caplog, time_machine):
    time_machine.move_to(
        datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5)
    )
    with caplog.at_level(logging.WARNING, logger="jobclaims"):
        JobRun.objects.claim("charge", "w", lease=LEASE)
    [warning] = caplog.records
    assert warning.host in warning.getMessage()
    assert 299 < warning.clock_offset.total_seconds() < 301


def test_a_host_clock_close_to_the_database_is_not_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="jobclaims"):
        JobRun.objects.claim("charge", "w", lease=LEASE)
    assert caplog.records == []
