"""Interval schedules ("every 90 minutes"): fire times, keys, spellings and bad input.

The fires are checked against a computation of this file's own, from the
definition alone: every whole second of a span, kept when the seconds since
the anchor are a whole number of periods. It shares nothing with
``jobclaims.time.intervals``.
"""

from __future__ import annotations

import datetime
import itertools

import pytest
from django.test import override_settings

from jobclaims import JobCommand
from jobclaims.jobs.schedules import JobSchedule, problems
from jobclaims.time.cron import CronSchedule
from jobclaims.time.expressions import read
from jobclaims.time.intervals import IntervalSchedule

UTC = datetime.timezone.utc
SECOND = datetime.timedelta(seconds=1)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)


def by_definition(
    period: int, anchor: datetime.datetime, start: datetime.datetime, end: datetime.datetime
) -> list[datetime.datetime]:
    """Each second after ``start`` up to ``end`` that is ``anchor`` plus a whole
    number of ``period`` seconds, none before ``anchor``: walked, not computed."""
    fires = []
    moment = start.replace(microsecond=0) + SECOND
    while moment <= end:
        since = int((moment - anchor).total_seconds())
        if since >= 0 and since % period == 0:
            fires.append(moment)
        moment += SECOND
    return fires


def utc(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize(
    ("expression", "period", "anchor"),
    [
        ("every 90 minutes", 5400, EPOCH),
        ("every 7 seconds", 7, EPOCH),
        ("every 1 hour", 3600, EPOCH),
        ("every 25 hours from 2026-12-04T03:10:05+00:00", 90000, utc("2026-12-04T03:10:05+00:00")),
        ("every 45 min from 2026-12-05T00:07Z", 2700, utc("2026-12-05T00:07+00:00")),
    ],
)
def test_an_interval_fires_where_whole_periods_from_its_anchor_fall(expression, period, anchor):
    schedule = IntervalSchedule(expression)
    start, end = utc("2026-12-04T22:59:30+00:00"), utc("2026-12-05T05:00:00+00:00")
    expected = by_definition(period, anchor, start, end)
    assert schedule.fires_between(start, end) == expected
    # The latest fire at or before each moment, and the next after it.
    for moment in (start, expected[0], expected[0] + SECOND, end):
        walked = by_definition(period, anchor, moment - datetime.timedelta(days=2), moment)
        assert schedule.latest_fire(moment) == (walked[-1] if walked else None), moment
        assert (
            schedule.next_fire(moment)
            == by_definition(period, anchor, moment, end + 2 * schedule.period)[0]
        )


def test_an_interval_has_no_fire_before_its_anchor():
    schedule = read("every 10 minutes from 2026-12-05T12:00+00:00")
    assert schedule.latest_fire(utc("2026-12-05T11:59:59+00:00")) is None
    assert schedule.next_fire(utc("2026-01-01T00:00+00:00")) == utc("2026-12-05T12:00+00:00")
    assert schedule.fires_between(utc("2026-12-05T11:00+00:00"), utc("2026-12-05T12:20+00:00")) == [
        utc("2026-12-05T12:00+00:00"),
        utc("2026-12-05T12:10+00:00"),
        utc("2026-12-05T12:20+00:00"),
    ]


def test_an_interval_is_elapsed_time_and_its_keys_stay_one_per_instant_across_both_changes():
    # Every 30 minutes across New York's fall-back night: 01:00 and 01:30
    # happen twice, an hour apart, and each instant keeps a key of its own.
    schedule = IntervalSchedule("every 30 minutes", "America/New_York")
    fires = schedule.fires_between(utc("2026-11-01T04:45+00:00"), utc("2026-11-01T07:15+00:00"))
    assert [b - a for a, b in itertools.pairwise(fires)] == [30 * 60 * SECOND] * 4
    assert [schedule.key(fire) for fire in fires] == [
        "2026-11-01T01:00-04:00",
        "2026-11-01T01:30-04:00",
        "2026-11-01T01:00-05:00",
        "2026-11-01T01:30-05:00",
        "2026-11-01T02:00-05:00",
    ]
    # Every day from 02:30 before the spring-forward night: 24 hours later is
    # 03:30 daylight time, not a 02:30 that does not exist.
    daily = IntervalSchedule("every 1 day from 2026-03-07T02:30", "America/New_York")
    days = daily.fires_between(utc("2026-03-07T00:00+00:00"), utc("2026-03-09T12:00+00:00"))
    assert [daily.key(fire) for fire in days] == [
        "2026-03-07T02:30-05:00",
        "2026-03-08T03:30-04:00",
        "2026-03-09T03:30-04:00",
    ]


@override_settings(TIME_ZONE="Europe/Paris")
def test_from_is_a_wall_time_in_the_schedules_zone_unless_it_has_an_offset():
    assert IntervalSchedule("every 1 hour from 2026-12-05T03:00").anchor == utc(
        "2026-12-05T02:00+00:00"
    )
    assert IntervalSchedule("every 1 hour from 2026-12-05T03:00", "Asia/Tokyo").anchor == utc(
        "2026-12-04T18:00+00:00"
    )
    assert IntervalSchedule("every 1 hour from 2026-12-05T03:00-05:00").anchor == utc(
        "2026-12-05T08:00+00:00"
    )


def test_spellings_of_one_interval_are_one_schedule_and_other_intervals_are_not():
    same = [
        "every 90 minutes",
        "every 5400 seconds",
        "Every  90 mins",
        "every 90m from 1970-01-01T00:00Z",
        "every 90 min from 1970-01-01T01:00+01:00",
    ]
    assert len({read(each).fires for each in same}) == 1
    different = ["every 91 minutes", "every 90 minutes from 2026-12-05T00:01Z", "*/90 * * * *"]
    assert all(read(each).fires != read(same[0]).fires for each in different)
    assert read("every 2 h").describe() == "Every 2 hours"
    assert (
        read("every 1 day from 2026-12-05T03:00Z").describe()
        == "Every 1 day from 2026-12-05 03:00:00 UTC"
    )


def test_an_operators_window_names_the_fire_it_falls_in_or_the_days_first():
    schedule = read("every 90 minutes")
    assert schedule.key(schedule.fire_for("2026-12-05T04:29")) == "2026-12-05T03:00+00:00"
    assert schedule.key(schedule.fire_for("2026-12-05")) == "2026-12-05T00:00+00:00"
    with pytest.raises(ValueError, match="names no fire time of 'every 90 minutes from"):
        read("every 90 minutes from 2026-12-06T00:00Z").fire_for("2026-12-05T12:00")


def test_a_cron_expression_is_still_cron():
    assert isinstance(read("*/5 * * * *"), CronSchedule)
    assert isinstance(read("every 5 minutes"), IntervalSchedule)


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("every 0 minutes", "schedule 'every 0 minutes' is no interval at all"),
        ("every 5 fortnights", "schedule 'every 5 fortnights' is not an interval"),
        ("every -5 minutes", "schedule 'every -5 minutes' is not an interval"),
        ("every minute", "schedule 'every minute' is not an interval"),
        (
            "every 5 minutes from yesterday",
            "schedule 'every 5 minutes from yesterday': from 'yesterday' is not an ISO 8601",
        ),
        ("every 5 minutes until 2027", "schedule 'every 5 minutes until 2027' is not an interval"),
    ],
)
def test_a_job_with_a_bad_interval_is_refused_with_the_fix(expression, problem):
    job = type(
        "Command", (JobCommand,), {"__module__": "app.commands.nightly", "schedule": expression}
    )
    (found,) = problems(job)
    assert found.startswith(f"nightly: {problem}"), found
    assert "write it like 'every 90 minutes'" in found


def test_a_jitter_or_a_fixed_window_longer_than_the_period_is_refused():
    attributes = {"__module__": "app.commands.nightly", "schedule": "every 10 minutes"}
    jittered = type(
        "Command", (JobCommand,), {**attributes, "jitter": datetime.timedelta(minutes=10)}
    )
    (found,) = problems(jittered)
    assert "jitter 0:10:00 is not shorter than the 0:10:00 between two fires" in found
    windowed = type(
        "Command", (JobCommand,), {**attributes, "window": datetime.timedelta(minutes=11)}
    )
    (found,) = problems(windowed)
    assert "schedule 'every 10 minutes' contradicts window" in found
    assert "or make it at most 0:10:00" in found
    fitting = type(
        "Command", (JobCommand,), {**attributes, "window": datetime.timedelta(minutes=10)}
    )
    assert problems(fitting) == []
    job = JobSchedule.of(fitting(), "nightly")
    # Each fire claims the fixed window it opens.
    assert job.slots.key_at(utc("2026-12-05T10:10+00:00")) != job.slots.key_at(
        utc("2026-12-05T10:20+00:00")
    )
