"""Signals and log records as claims are taken, refused, taken over and finished."""

from __future__ import annotations

import datetime
import logging

import pytest

from jobclaims import signals
from jobclaims.models import JobRun
from jobclaims.testing import race

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
    held = received[1][1]
    assert {key: held[key] for key in ("job", "window", "reason")} == {
        "job": "charge",
        "window": "w",
        "reason": "held",
    }
    assert (held["refusal"].owner, held["refusal"].expires_at) == (run.owner, run.expires_at)
    finished = received[2][1]
    assert finished["status"] == "succeeded"
    assert run.finished_at is not None
    assert finished["duration"] == run.finished_at - run.claimed_at
    assert received[3][1]["reason"] == "succeeded"
    assert received[3][1]["refusal"].finished_at == run.finished_at


def test_a_takeover_is_signalled_with_the_status_it_replaced(received):
    crashed = JobRun.objects.claim("charge", "w", lease=LEASE)
    assert crashed is not None
    JobRun.objects.filter(pk=crashed.pk).expire()
    successor = JobRun.objects.claim("charge", "w", lease=LEASE)
    assert received[-1] == ("claim_taken_over", {"run": successor, "previous_status": "running"})


def test_a_skip_for_another_windows_run_says_overlap(received):
    JobRun.objects.claim("charge", "08:00", lease=LEASE)
    JobRun.objects.claim("charge", "09:00", lease=LEASE)
    name, sent = received[-1]
    assert (name, sent["job"], sent["window"], sent["reason"]) == (
        "claim_skipped",
        "charge",
        "09:00",
        "overlap",
    )
    assert sent["refusal"].held_window == "08:00"


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


@pytest.fixture
def failing_receivers():
    """A receiver of every jobclaims signal, each raising."""

    def fail(sender, signal, **kwargs):
        raise RuntimeError("the metrics backend is down")

    for name in ("claim_acquired", "claim_taken_over", "claim_skipped", "run_finished"):
        getattr(signals, name).connect(fail)
    yield
    for name in ("claim_acquired", "claim_taken_over", "claim_skipped", "run_finished"):
        getattr(signals, name).disconnect(fail)


def test_a_receiver_that_raises_is_logged_with_its_traceback_and_the_claim_goes_on(
    failing_receivers, received, caplog
):
    with caplog.at_level(logging.ERROR, logger="jobclaims"):
        crashed = JobRun.objects.claim("charge", "w", lease=LEASE)
        assert crashed is not None
        assert JobRun.objects.claim("charge", "w", lease=LEASE) is None
        JobRun.objects.filter(pk=crashed.pk).expire()
        successor = JobRun.objects.claim("charge", "w", lease=LEASE)
        assert successor is not None
        assert successor.release() is True
    assert [name for name, _ in received] == [
        "claim_acquired",
        "claim_skipped",
        "claim_acquired",
        "claim_taken_over",
        "run_finished",
    ]
    errors = [record for record in caplog.records if record.name == "jobclaims"]
    assert len(errors) == 5
    assert all(record.levelno == logging.ERROR for record in errors)
    assert all(record.exc_info and record.exc_info[0] is RuntimeError for record in errors)
    assert errors[0].getMessage().startswith("A receiver of claim_acquired, ")
    assert (errors[0].job, errors[0].window) == ("charge", "w")
    assert JobRun.objects.get().status == JobRun.Status.SUCCEEDED


def test_a_job_runs_and_records_its_outcome_though_a_claim_acquired_receiver_raises():
    failing = {"TESTAPP_FAILING_RECEIVER": "claim_acquired"}
    [result] = race("charge_ledger", "--window", "2026-11-29T10:00", instances=1, env=failing)
    assert result.outcome == "ran", result
    assert "A receiver of claim_acquired" in result.stderr
    assert "Traceback" in result.stderr
    assert "RuntimeError: the metrics backend is down" in result.stderr
    assert JobRun.objects.get().status == JobRun.Status.SUCCEEDED
