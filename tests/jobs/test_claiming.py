"""claim() and @claimed: the same guarantees outside management commands."""

from __future__ import annotations

import datetime
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobclaims.exceptions import NotClaimed
from jobclaims.jobs.claiming import claim, claimed
from jobclaims.models import JobRun, JobSkip
from jobclaims.testing import race
from jobclaims.time import clock, leases
from jobclaims.time.clock import database_now, now_sql
from jobclaims.time.slots import Slots
from tests.support.helpers import outcomes, verbs
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "2026-11-29T10:00"


def test_the_block_runs_as_the_holder_and_its_success_is_recorded():
    with claim("sync_ledger", window="hourly", key=KEY) as run:
        assert JobRun.objects.active().get() == run
    stored = JobRun.objects.get()
    assert (stored.window, stored.status) == ("2026-11-29T10:00+00:00", "succeeded")


def test_a_refused_claim_raises_not_claimed_and_the_block_does_not_run():
    ran = []
    with (
        claim("sync_ledger", window="hourly", key=KEY),
        pytest.raises(NotClaimed, match="sync_ledger 2026-11-29T10:00"),
        claim("sync_ledger", window="hourly", key=KEY),
    ):
        ran.append(True)
    assert ran == []


@pytest.mark.parametrize("key", [KEY, None], ids=["an operator's key", "the current window"])
def test_a_claim_where_a_users_time_zone_is_active_names_the_window_cron_names(key):
    """A view behind a middleware that activates its user's zone, or an
    admin request, claims the slot a cron job claims: one hour is one run,
    not a second one spelled ``+09:00``. (The current window's two claims
    are a few milliseconds apart: they name one hour but at its very edge.)"""
    with (
        claim("sync_ledger", window="hourly", key=key, allow_overlap=True) as first,
        timezone.override("Asia/Tokyo"),
        pytest.raises(NotClaimed, match=re.escape(f"sync_ledger {first.window} ")),
        claim("sync_ledger", window="hourly", key=key, allow_overlap=True),
    ):
        pass
    assert JobRun.objects.get().window == first.window


def test_an_error_in_the_block_is_recorded_and_raised():
    with pytest.raises(ZeroDivisionError), claim("sync_ledger", window="hourly", key=KEY):
        raise ZeroDivisionError("division by zero")
    stored = JobRun.objects.get()
    assert stored.status == "failed"
    assert stored.error.startswith("ZeroDivisionError: division by zero\n\nTraceback")


def test_the_lease_defaults_to_the_jobclaims_setting(settings):
    settings.JOBCLAIMS = {"DEFAULT_LEASE": datetime.timedelta(seconds=42)}
    with claim("sync_ledger", key="2026-11-29T10:25") as run:
        assert run.expires_at - run.claimed_at == datetime.timedelta(seconds=42)


def test_a_bad_window_is_refused_before_anything_is_written():
    with (
        pytest.raises(ValueError, match="unknown window 'hourl'"),
        claim("sync_ledger", window="hourl"),
    ):
        pass
    assert not JobRun.objects.exists()


@pytest.mark.parametrize(
    ("lease", "message"),
    [
        (datetime.timedelta(days=367), "lease is 367 days, 0:00:00, longer than the 366 days"),
        (datetime.timedelta(0), "lease must be a positive datetime.timedelta"),
    ],
)
def test_a_lease_out_of_bounds_is_refused_before_anything_is_written(lease, message):
    with pytest.raises(ValueError, match=message), claim("sync_ledger", key=KEY, lease=lease):
        pass
    assert not JobRun.objects.exists()
    assert not JobSkip.objects.exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lease": datetime.timedelta(days=400)}, "longer than the 366 days"),
        ({"lease": datetime.timedelta(0)}, "lease must be a positive datetime.timedelta"),
        ({"window": datetime.timedelta(milliseconds=10)}, "whole number of seconds"),
        (
            {"max_run_time": datetime.timedelta(0)},
            "max_run_time must be a positive datetime.timedelta",
        ),
    ],
)
def test_claimed_refuses_a_bad_lease_or_window_when_it_decorates(options, message):
    with pytest.raises(ValueError, match=message):
        claimed("tally", **options)
    assert not JobRun.objects.exists()


@claimed("tally", window="daily")
def tally(amount: int) -> int:
    return amount * 2


@pytest.mark.parametrize("max_run_time", [datetime.timedelta(0), datetime.timedelta(-1), 60])
def test_a_max_run_time_that_is_not_a_positive_timedelta_is_refused_before_anything_is_written(
    max_run_time,
):
    with (
        pytest.raises(ValueError, match=r"max_run_time must be a positive datetime\.timedelta"),
        claim("sync_ledger", key=KEY, max_run_time=max_run_time),
    ):
        pass
    assert not JobRun.objects.exists()


def test_a_claimed_function_returns_its_value_once_per_window_and_none_after():
    assert tally(21) == 42
    assert tally(21) is None
    assert JobRun.objects.get().job == "tally"


def test_a_claimed_function_is_named_after_itself_by_default():
    @claimed(window="daily")
    def send_reports() -> str:
        return "sent"

    assert send_reports() == "sent"
    assert JobRun.objects.get().job == (
        "tests.jobs.test_claiming.test_a_claimed_function_is_named_after_itself_by_default"
        ".<locals>.send_reports"
    )


def test_two_processes_calling_a_claimed_function_together_run_it_once():
    results = race("charge_decorated", instances=2)
    assert outcomes(results) == {"ran": 1, "skipped": 1}, results
    assert Charge.objects.count() == 1


def test_a_django_task_runs_its_claimed_work_once_per_window():
    pytest.importorskip("django.tasks", reason="django.tasks arrived in Django 6.0")
    from django.test import override_settings

    from tests.testapp.tasks import nightly_export

    backend = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    with override_settings(TASKS=backend):
        first = nightly_export.enqueue()
        second = nightly_export.enqueue()
    assert (first.status, first.return_value) == ("SUCCESSFUL", "exported")
    # Refused: not a success returning None, which could not be told from a
    # run, but the task's failure to run, saying why.
    assert second.status == "FAILED"
    [error] = second.errors
    assert error.exception_class is NotClaimed
    assert "nightly_export" in error.traceback
    assert "was not claimed: it already succeeded at " in error.traceback
    assert JobRun.objects.get().job == "nightly_export"
    # Called as a function, outside a task, a refusal is still None.
    assert nightly_export.func() is None


def test_claimed_above_a_django_task_is_refused_naming_the_fix():
    pytest.importorskip("django.tasks", reason="django.tasks arrived in Django 6.0")
    from tests.testapp.tasks import unclaimed_export

    with pytest.raises(TypeError, match="Put @claimed under @task"):
        claimed("export", window="daily")(unclaimed_export)


def clock_reads(queries: CaptureQueriesContext) -> int:
    return sum(query["sql"] == f"SELECT {now_sql(connection)}" for query in queries)


def test_a_block_that_starts_on_its_claim_sends_no_statement_but_the_claims_and_release():
    # The claim reads the pauses once it committed; the block, starting at
    # once, starts on that read instead of sending one more.
    lease = datetime.timedelta(minutes=5)
    with CaptureQueriesContext(connection) as bare:
        run = JobRun.objects.try_claim("bare", "2026-11-29T10:00+00:00", lease=lease)
        assert isinstance(run, JobRun)
        assert run.release()
    with CaptureQueriesContext(connection) as block, claim("block", key=KEY, lease=lease):
        pass
    assert verbs(block) == verbs(bare)
    assert JobRun.objects.get(job="block").status == JobRun.Status.SUCCEEDED


def test_claims_in_a_row_read_the_database_clock_once_and_each_claims_its_window(monkeypatch):
    monkeypatch.setattr(clock, "_readings", {})
    with CaptureQueriesContext(connection) as first, claim("first", window="daily"):
        pass
    with CaptureQueriesContext(connection) as second, claim("second", window="daily"):
        pass
    assert (clock_reads(first), clock_reads(second)) == (1, 0)
    today = Slots.of_window("daily").current_key(database_now())
    assert set(JobRun.objects.values_list("window", flat=True)) == {today}


def test_a_reading_of_the_clock_too_old_to_carry_is_read_again(monkeypatch):
    monkeypatch.setattr(clock, "_readings", {})
    clock.read_database_now()
    [(alias, reading)] = clock._readings.items()
    aged = clock.CARRIED_FOR + 1
    clock._readings[alias] = reading._replace(
        sent=reading.sent - aged, answered=reading.answered - aged
    )
    with CaptureQueriesContext(connection) as queries, claim("aged", window="daily"):
        pass
    assert clock_reads(queries) == 1


def test_a_reading_that_cannot_tell_which_window_is_due_is_read_again(monkeypatch):
    # A reading answered two seconds after it was sent, a second before an
    # edge of the day: the day due now is on one side or the other of it.
    monkeypatch.setattr(clock, "_readings", {})
    sent = leases.clock()
    midnight = datetime.datetime(2027, 1, 1, tzinfo=datetime.timezone.utc)
    clock._readings["default"] = clock.Reading(
        midnight - datetime.timedelta(seconds=1), sent - 2, sent
    )
    with CaptureQueriesContext(connection) as queries, claim("edge", window="daily") as run:
        pass
    assert clock_reads(queries) == 1
    assert run.window == Slots.of_window("daily").current_key(database_now())
