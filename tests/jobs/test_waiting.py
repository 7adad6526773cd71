"""Waiting for a dead holder's lease: Refusal.pause(), claim(wait=...) and --wait."""

from __future__ import annotations

import datetime
import logging
import time

import pytest

from jobclaims.claims.rule import Reason, Refusal, State
from jobclaims.exceptions import NotClaimed
from jobclaims.jobs.claiming import claim, claimed, window_key
from jobclaims.models import JobRun
from jobclaims.time.clock import database_now
from tests.support.factories import claim_in_state
from tests.support.helpers import run_command
from tests.testapp.management.commands.charge_ledger import Command as ChargeLedger
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "2026-11-29T10:00"
WINDOW = "2026-11-29T10:00+00:00"
SECOND = datetime.timedelta(seconds=1)
MINUTE = datetime.timedelta(minutes=1)


def dead_holder(lease: datetime.timedelta) -> JobRun:
    """A claim that no one renews or releases: its process died just now."""
    run = JobRun.objects.claim("sync_ledger", WINDOW, lease=lease, schedule="hourly")
    assert run is not None
    return run


def refusal_of(window: str = WINDOW) -> Refusal:
    refused = JobRun.objects.try_claim("sync_ledger", window, lease=MINUTE, schedule="hourly")
    assert isinstance(refused, Refusal), refused
    return refused


def test_a_refusal_by_a_succeeded_window_waits_for_nothing():
    claim_in_state(State.SUCCEEDED, job="sync_ledger", window=WINDOW)
    refusal = refusal_of()
    now = database_now()
    assert refusal.reason == Reason.SUCCEEDED
    assert refusal.pause(now, now + datetime.timedelta(days=1)) is None


def test_a_refusal_by_a_holder_waits_until_its_lease_ends_within_the_deadline():
    holder = dead_holder(5 * MINUTE)
    refusal = refusal_of()
    now = database_now()
    assert (refusal.reason, refusal.expires_at) == (Reason.HELD, holder.expires_at)
    pause = refusal.pause(now, now + 10 * MINUTE)
    assert pause is not None
    assert holder.expires_at - now < pause < holder.expires_at - now + SECOND
    assert refusal.pause(now, now + MINUTE) is None  # Ends after the deadline.
    assert "until" in str(refusal)


def test_a_refusal_by_a_run_of_another_window_is_an_overlap_until_its_lease_ends():
    holder = dead_holder(5 * MINUTE)
    refusal = refusal_of("2026-11-29T11:00+00:00")
    assert (refusal.reason, refusal.expires_at) == (Reason.OVERLAP, holder.expires_at)


def test_a_claim_that_may_wait_takes_the_window_over_when_the_dead_holders_lease_ends():
    dead_holder(SECOND)
    began = time.monotonic()
    with claim("sync_ledger", window="hourly", key=KEY, wait=5 * SECOND) as run:
        assert run.attempt == 2
    assert time.monotonic() - began < 4
    assert JobRun.objects.get().status == "succeeded"


def test_a_claim_does_not_wait_for_a_lease_that_ends_after_its_wait():
    dead_holder(datetime.timedelta(minutes=5))
    began = time.monotonic()
    with (
        pytest.raises(NotClaimed),
        claim("sync_ledger", window="hourly", key=KEY, wait=5 * SECOND),
    ):
        pass
    assert time.monotonic() - began < 1


def test_a_claim_without_wait_skips_a_dead_holder_at_once():
    dead_holder(SECOND)
    with pytest.raises(NotClaimed), claim("sync_ledger", window="hourly", key=KEY):
        pass
    assert JobRun.objects.get().attempt == 1


def test_a_claimed_function_may_wait_too():
    @claimed("sync_ledger", window="hourly", wait=5 * SECOND)
    def sync_ledger() -> str:
        return "synced"

    dead = JobRun.objects.claim("sync_ledger", window_key("hourly"), lease=SECOND)
    assert dead is not None
    assert sync_ledger() == "synced"
    assert JobRun.objects.get().attempt == 2


@pytest.mark.parametrize("wait", [datetime.timedelta(0), -SECOND, 5])
def test_a_wait_that_is_not_a_positive_timedelta_is_refused_before_anything_is_written(wait):
    with (
        pytest.raises(ValueError, match=r"wait must be a positive datetime\.timedelta"),
        claim("sync_ledger", key=KEY, wait=wait),
    ):
        pass
    with pytest.raises(ValueError, match=r"wait must be a positive datetime\.timedelta"):
        claimed("sync_ledger", wait=wait)
    assert not JobRun.objects.exists()


def test_a_refusal_logs_one_line_at_info_and_nothing_at_warning(caplog):
    claim_in_state(State.SUCCEEDED, job="sync_ledger", window=WINDOW)

    @claimed("sync_ledger", window="hourly")
    def sync_ledger() -> str:
        return "synced"

    with caplog.at_level(logging.DEBUG, logger="jobclaims"):
        with pytest.raises(NotClaimed), claim("sync_ledger", window="hourly", key=KEY):
            pass
        JobRun.objects.filter(job="sync_ledger").update(window=window_key("hourly"))
        assert sync_ledger() is None
    loud = [record for record in caplog.records if record.levelno >= logging.INFO]
    assert [record.levelno for record in loud] == [logging.INFO, logging.INFO]
    assert all("it already succeeded at" in record.getMessage() for record in loud), loud


def test_a_job_run_with_wait_takes_over_the_window_of_a_run_that_died():
    JobRun.objects.claim("charge_ledger", WINDOW, lease=SECOND)
    out, err, status = run_command("charge_ledger", "--window", WINDOW, "--wait", "5")
    assert status == 0, err
    assert f"Claimed charge_ledger {WINDOW} (attempt 2)" in out
    assert Charge.objects.count() == 1


def test_a_job_run_with_wait_skips_a_window_held_longer_than_its_wait():
    JobRun.objects.claim("charge_ledger", WINDOW, lease=datetime.timedelta(minutes=5))
    out, _, status = run_command("charge_ledger", "--window", WINDOW, "--wait", "1")
    assert status == 0
    assert out.startswith(f"Skipped charge_ledger {WINDOW}: held by ")
    assert not Charge.objects.exists()


@pytest.mark.parametrize("wait", ["0", "-1", "nan", "inf", "soon"])
def test_a_bad_wait_option_is_refused_and_nothing_is_written(wait, capsys):
    with pytest.raises(SystemExit):
        ChargeLedger().run_from_argv(["manage.py", "charge_ledger", "--wait", wait])
    assert "argument --wait: " in capsys.readouterr().err
    assert not JobRun.objects.exists()
