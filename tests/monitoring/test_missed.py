"""Windows that no instance ever claimed, across time zones and DST changes."""

from __future__ import annotations

import datetime

import pytest
from django.test import override_settings

from jobclaims.jobs.claiming import claim
from jobclaims.models import JobRun
from jobclaims.monitoring.health import missed_windows
from jobclaims.time.clock import database_now
from jobclaims.time.windows import resolve

HOUR = datetime.timedelta(hours=1)
DAY = datetime.timedelta(days=1)


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


@override_settings(TIME_ZONE="America/New_York")
def test_the_hours_of_a_fall_back_day_are_twenty_five_windows():
    keys = resolve("hourly").keys_between(
        at("2026-11-01T04:00+00:00"), at("2026-11-02T05:00+00:00")
    )
    assert len(keys) == len(set(keys)) == 25
    assert keys[1:3] == ["2026-11-01T01:00-04:00", "2026-11-01T01:00-05:00"]


@override_settings(TIME_ZONE="America/New_York")
def test_the_hours_of_a_spring_forward_day_are_twenty_three_windows():
    keys = resolve("hourly").keys_between(
        at("2026-03-08T05:00+00:00"), at("2026-03-09T04:00+00:00")
    )
    assert len(keys) == 23
    assert "2026-03-08T02:00-05:00" not in keys


@override_settings(TIME_ZONE="Europe/Paris")
def test_each_day_across_a_dst_change_is_one_window():
    keys = resolve("daily").keys_between(at("2026-10-23T22:00+00:00"), at("2026-10-28T01:00+00:00"))
    assert keys == ["2026-10-24", "2026-10-25", "2026-10-26", "2026-10-27"]


def test_the_window_now_running_is_not_listed():
    now = at("2026-11-29T10:25+00:00")
    assert resolve("hourly").keys_between(now - 2 * HOUR, now) == [
        "2026-11-29T08:00+00:00",
        "2026-11-29T09:00+00:00",
    ]


def claim_at(job: str, spec: str, moment: datetime.datetime) -> None:
    key = resolve(spec).key_at(moment)
    with claim(job, window=spec, key=key, allow_overlap=True) as run:
        pass
    JobRun.objects.filter(pk=run.pk).update(claimed_at=moment)


@pytest.mark.django_db(transaction=True)
def test_an_hourly_jobs_unclaimed_hours_are_missed():
    now = database_now()
    for hours_ago in (5, 4, 2, 0):
        claim_at("sync", "hourly", now - hours_ago * HOUR)
    hourly = resolve("hourly")
    assert missed_windows("sync") == [hourly.key_at(now - 3 * HOUR), hourly.key_at(now - HOUR)]


@pytest.mark.django_db(transaction=True)
@override_settings(TIME_ZONE="Pacific/Auckland")
def test_a_daily_jobs_unclaimed_days_are_missed_in_the_project_time_zone():
    now = database_now()
    for days_ago in (6, 5, 1):
        claim_at("report", "daily", now - days_ago * DAY)
    daily = resolve("daily")
    assert missed_windows("report") == [daily.key_at(now - n * DAY) for n in (4, 3, 2)]


@pytest.mark.django_db(transaction=True)
def test_a_job_with_no_schedule_recorded_has_no_known_windows():
    JobRun.objects.claim("adhoc", "whenever", lease=HOUR)
    assert missed_windows("adhoc") == []


@pytest.mark.django_db(transaction=True)
def test_a_dead_claim_older_than_the_pruned_history_does_not_make_pruned_windows_missed():
    now = database_now()
    claim_at("sync", "hourly", now - 48 * HOUR)
    JobRun.objects.filter(job="sync").update(status=JobRun.Status.RUNNING)
    for hours_ago in (2, 1, 0):
        claim_at("sync", "hourly", now - hours_ago * HOUR)
    assert missed_windows("sync") == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("schedule", ["0-second", "x-second", "fortnightly"])
def test_a_recorded_schedule_that_names_no_window_lists_no_missed_windows(schedule):
    JobRun.objects.claim("flicker", "2026-11-29T10:00:00+00:00", lease=HOUR, schedule=schedule)
    assert missed_windows("flicker") == []


@pytest.mark.django_db(transaction=True)
def test_a_fixed_window_longer_than_the_look_back_can_reach_still_lists_its_windows():
    long = datetime.timedelta(days=800)
    with claim("biennial", window=long, allow_overlap=True):
        pass
    assert missed_windows("biennial") == []
