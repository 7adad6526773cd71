"""Slots: one run per interval of time, however a deploy spells its window."""

from __future__ import annotations

import datetime
import importlib
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection
from django.test import override_settings

from jobclaims import slots, windows
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.cron import CronSchedule
from jobclaims.models import JobRun, JobSkip
from jobclaims.testing import race
from tests.testapp.models import Charge

HOUR = datetime.timedelta(hours=1)
SECOND = datetime.timedelta(seconds=1)
UTC = datetime.timezone.utc

record_slots = importlib.import_module("jobclaims.migrations.0003_job_run_slots").record_slots


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def test_one_hour_has_one_key_however_its_window_is_spelled():
    moment = at("2026-12-01T20:17:03+00:00")
    keys = {windows.resolve(spec).key_at(moment) for spec in (HOUR, "hourly")}
    assert keys == {"2026-12-01T20:00+00:00"}


def test_a_schedule_that_gains_a_seconds_field_keys_its_fires_as_before():
    fire = at("2026-12-01T20:00+00:00")
    assert CronSchedule("0 20 * * *").key(fire) == CronSchedule("0 0 20 * * *").key(fire)
    assert CronSchedule("30 0 20 * * *").key(fire + 30 * SECOND) == "2026-12-01T20:00:30+00:00"


@override_settings(TIME_ZONE="America/New_York")
@pytest.mark.parametrize(
    ("schedule", "key", "start", "end"),
    [
        ("hourly", "2026-12-01T15:00-05:00", "2026-12-01T20:00Z", "2026-12-01T21:00Z"),
        # A key as fixed windows spelled it before keys were canonical.
        ("3600-second", "2026-12-01T15:00:00-05:00", "2026-12-01T20:00Z", "2026-12-01T21:00Z"),
        # The day the clocks spring forward has 23 hours.
        ("daily", "2026-03-08", "2026-03-08T05:00Z", "2026-03-09T04:00Z"),
        ("monthly", "2026-02", "2026-02-01T05:00Z", "2026-03-01T05:00Z"),
        ("weekly", "2026-W10", "2026-03-02T05:00Z", "2026-03-09T04:00Z"),
        # A fire's slot is the second it names.
        ("5 2 * * *", "2026-12-01T02:05-05:00", "2026-12-01T07:05Z", "2026-12-01T07:05:01Z"),
    ],
)
def test_a_slot_is_the_interval_its_window_covers(schedule, key, start, end):
    assert slots.bounds(schedule, key) == (at(start), at(end))


@pytest.mark.parametrize(("schedule", "key"), [("", "2026-12-01"), ("hourly", "yesterday")])
def test_a_claim_without_a_schedule_or_a_key_that_parses_has_no_slot(schedule, key):
    assert slots.bounds(schedule, key) is None


def claim(
    window: str, schedule: str, *, force: bool = False, allow_overlap: bool = False
) -> JobRun | Refusal:
    return JobRun.objects.try_claim(
        "deployed", window, lease=HOUR, schedule=schedule, force=force, allow_overlap=allow_overlap
    )


@pytest.mark.django_db
def test_a_claim_is_refused_once_another_spelling_of_its_slot_succeeded_unless_forced():
    old = claim("2026-12-01T20:00:00+00:00", "3600-second")
    assert isinstance(old, JobRun)
    old.release()

    refusal = claim("2026-12-01T20:00+00:00", "hourly")

    assert isinstance(refusal, Refusal)
    assert refusal.reason == Reason.SLOT_RAN
    assert str(refusal) == "the 2026-12-01T20:00:00+00:00 run covers the same time and is done"
    assert JobSkip.objects.get().reason == "slot-ran"
    assert isinstance(claim("2026-12-01T20:00+00:00", "hourly", force=True), JobRun)


@pytest.mark.django_db
def test_a_fire_inside_a_window_still_held_is_refused_even_when_overlap_is_allowed():
    daily = claim("2026-12-01", "daily", allow_overlap=True)
    assert isinstance(daily, JobRun)
    refusal = claim("2026-12-01T20:01+00:00", "1 20 * * *", allow_overlap=True)
    assert isinstance(refusal, Refusal)
    assert str(refusal) == "the 2026-12-01 run covers the same time and is still running"


@pytest.mark.django_db
def test_a_failed_run_of_another_spelling_does_not_refuse_the_slot():
    old = claim("2026-12-01T20:00:00+00:00", "3600-second")
    assert isinstance(old, JobRun)
    old.release(JobRun.Status.FAILED, error="boom")
    assert isinstance(claim("2026-12-01T20:00+00:00", "hourly"), JobRun)


@pytest.mark.django_db
def test_the_slot_after_one_that_ran_is_claimed():
    first = claim("2026-12-01", "daily")
    assert isinstance(first, JobRun)
    first.release()
    assert isinstance(claim("2026-12-02T00:00+00:00", "0 0 * * *"), JobRun)


@pytest.mark.django_db
def test_the_migration_records_the_slots_of_claims_made_before_it():
    run = claim("2026-12-01T20:00:00+00:00", "3600-second")
    unnamed = JobRun.objects.try_claim("other", "anything", lease=HOUR)
    JobRun.objects.update(slot_start=None, slot_end=None)

    record_slots(apps, SimpleNamespace(connection=connection))

    assert isinstance(run, JobRun)
    assert isinstance(unnamed, JobRun)
    run.refresh_from_db()
    unnamed.refresh_from_db()
    assert (run.slot_start, run.slot_end) == (at("2026-12-01T20:00Z"), at("2026-12-01T21:00Z"))
    assert (unnamed.slot_start, unnamed.slot_end) == (None, None)


def deploy(window: str, schedule: str = "") -> str:
    """Run the job as one deploy of its code declares it; what it did."""
    env = {"DEPLOYED_WINDOW": window, "DEPLOYED_SCHEDULE": schedule}
    (result,) = race("deployed", instances=1, env=env)
    if result.outcome == "skipped":
        assert "succeeded at" in result.stdout, result
    return result.outcome


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("before", "after"),
    [
        (("3600 s", ""), ("hourly", "")),
        (("daily", "0 0 * * *"), ("none", "0 0 * * *")),
        (("none", "0 * * * *"), ("none", "0 0 * * * *")),
    ],
    ids=["respelled", "window-removed", "seconds-field-added"],
)
def test_a_deploy_mid_slot_runs_the_slot_once_in_total(before, after):
    assert deploy(*before) == "ran"
    assert deploy(*after) == "skipped"
    assert Charge.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_slot_claimed_under_the_old_key_spelling_runs_once_after_the_upgrade():
    assert deploy("3600 s") == "ran"
    # What the release before canonical keys stored for the hour: seconds
    # and all, and no slot, until the migration records it.
    run = JobRun.objects.get()
    old_key = run.window.replace("+", ":00+")
    JobRun.objects.update(window=old_key, slot_start=None, slot_end=None)
    record_slots(apps, SimpleNamespace(connection=connection))

    (skipped,) = race("deployed", instances=1, env={"DEPLOYED_WINDOW": "hourly"})
    assert skipped.outcome == "skipped"
    assert f"the {old_key} run covers the same time and succeeded at" in skipped.stdout
    assert deploy("3600 s") == "skipped"
    assert Charge.objects.count() == 1
