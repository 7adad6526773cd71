"""Bounded schedules and one-offs: a start, an end, dates skipped, at most so many runs.

The expected fires are worked out here from the definitions, day by day or
second by second, sharing nothing with ``jobclaims.time.bounds``.
"""

from __future__ import annotations

import datetime
import zoneinfo

import pytest

from jobclaims import JobCommand, Schedule
from jobclaims.jobs.schedules import JobSchedule, problems
from jobclaims.scheduling import seen
from jobclaims.scheduling.schedule_versions import fingerprint_of

UTC = datetime.timezone.utc
PARIS = zoneinfo.ZoneInfo("Europe/Paris")


def job_with(*schedules: Schedule) -> type[JobCommand]:
    return type(
        "Command",
        (JobCommand,),
        {"__module__": "app.commands.nightly", "schedules": list(schedules)},
    )


def fires_of(schedule: Schedule) -> list[datetime.datetime]:
    job = JobSchedule.of(job_with(schedule)(), "nightly")
    return job.cron.fires_between(
        datetime.datetime(2026, 1, 1, tzinfo=UTC), datetime.datetime(2028, 1, 1, tzinfo=UTC)
    )


def test_a_daily_schedule_runs_from_its_start_to_its_end_skipping_holidays_at_most_so_often():
    schedule = Schedule(
        "0 3 * * *",
        name="december",
        time_zone="Europe/Paris",
        start="2026-12-01",
        end=datetime.date(2026, 12, 31),
        skip_dates=["2026-12-25", datetime.date(2026, 12, 26)],
        max_runs=20,
    )
    days = [datetime.date(2026, 12, day) for day in range(1, 32)]
    kept = [
        day for day in days if day not in (datetime.date(2026, 12, 25), datetime.date(2026, 12, 26))
    ]
    expected = [
        datetime.datetime.combine(day, datetime.time(3), PARIS).astimezone(UTC) for day in kept[:20]
    ]
    assert fires_of(schedule) == expected
    # Without max_runs, the end's own day is kept.
    assert fires_of(
        Schedule(
            "0 3 * * *",
            name="d",
            time_zone="Europe/Paris",
            start="2026-12-01",
            end="2026-12-31",
            skip_dates=["2026-12-25", "2026-12-26"],
        )
    )[-1] == datetime.datetime(2026, 12, 31, 3, tzinfo=PARIS).astimezone(UTC)


def test_a_bounded_schedules_latest_and_next_fires_stay_within_its_bounds():
    schedule = Schedule(
        "every 1 hour", name="h", start="2026-12-05T10:00Z", end="2026-12-05T12:00Z"
    )
    fires = JobSchedule.of(job_with(schedule)(), "nightly").cron
    before, inside, after = (
        datetime.datetime(2026, 12, 5, hour, 30, tzinfo=UTC) for hour in (9, 11, 13)
    )
    assert fires.latest_fire(before) is None
    assert fires.next_fire(before) == datetime.datetime(2026, 12, 5, 10, tzinfo=UTC)
    assert fires.latest_fire(inside) == datetime.datetime(2026, 12, 5, 11, tzinfo=UTC)
    assert fires.latest_fire(after) == datetime.datetime(2026, 12, 5, 12, tzinfo=UTC)
    assert fires.next_fire(after) is None
    assert "from 2026-12-05 10:00 UTC, until 2026-12-05 12:00 UTC" in fires.describe()


def test_a_one_off_fires_once_in_its_zone():
    schedule = Schedule("at 2026-12-24T18:00", name="eve", time_zone="Europe/Paris")
    assert fires_of(schedule) == [datetime.datetime(2026, 12, 24, 17, tzinfo=UTC)]
    job = JobSchedule.of(job_with(schedule)(), "nightly")
    assert job.slots.key_at(fires_of(schedule)[0]) == "2026-12-24T18:00+01:00"
    assert job.cron.describe() == "Once, at 2026-12-24 18:00:00 CET"


def test_bounds_take_fires_away_and_move_none_and_a_change_of_them_is_a_new_version():
    plain = Schedule("0 */6 * * *", name="p")
    bounded = Schedule("0 */6 * * *", name="p", skip_dates=["2026-06-01"], start="2026-05-01")
    assert set(fires_of(bounded)) < set(fires_of(plain))
    versions = {
        fingerprint_of(JobSchedule.of(job_with(each)(), "nightly"))
        for each in (plain, bounded, Schedule("0 */6 * * *", name="p", start="2026-05-01"))
    }
    assert len(versions) == 3
    # Written another way, one set of bounds is one version.
    same = Schedule(
        "0 */6 * * *",
        name="p",
        skip_dates=[datetime.date(2026, 6, 1)],
        start=datetime.date(2026, 5, 1),
    )
    assert fingerprint_of(JobSchedule.of(job_with(same)(), "nightly")) == fingerprint_of(
        JobSchedule.of(job_with(bounded)(), "nightly")
    )


@pytest.mark.parametrize(
    ("bounds", "problem"),
    [
        (
            {"max_runs": 3},
            "max_runs 3 counts runs from the schedule's start, and it has none; give it start=",
        ),
        (
            {"start": "2026-12-01", "max_runs": 0},
            "max_runs 0 must be a whole number of runs, 1 or more",
        ),
        (
            {"start": "2026-12-02", "end": "2026-12-01"},
            "end '2026-12-01' comes before start '2026-12-02'; swap them",
        ),
        (
            {"skip_dates": "2026-12-25"},
            "skip_dates '2026-12-25' must be a list of dates, like ['2026-12-25']",
        ),
        ({"skip_dates": ["25 December"]}, "skip_dates '25 December' must be dates, like"),
        (
            {"start": "tomorrow"},
            "start 'tomorrow' must be a date or date-time, like '2026-12-01'",
        ),
    ],
)
def test_bounds_that_cannot_work_are_refused_naming_the_fix(bounds, problem):
    (found,) = problems(job_with(Schedule("0 3 * * *", name="n", **bounds)))
    assert found.startswith(f"nightly: {problem}"), found


def test_a_one_off_that_names_no_moment_is_refused_naming_the_fix():
    (found,) = problems(job_with(Schedule("at noon", name="n")))
    assert found == (
        "nightly: schedule 'at noon': 'noon' is not an ISO 8601 date or date-time; "
        "write a one-off like 'at 2026-12-24T18:00' (a date and time)"
    )


def test_schedulers_that_bound_a_schedule_apart_disagree_and_respellings_agree():
    def seen_as(expression: str, start: datetime.date | str) -> str:
        job = JobSchedule.of(job_with(Schedule(expression, name="p", start=start))(), "nightly")
        return seen.fingerprint(seen.schedules_run([job]))

    assert seen_as("0 */6 * * *", "2026-05-01") == seen_as(
        "0 0-23/6 * * *", datetime.date(2026, 5, 1)
    )
    assert seen_as("0 */6 * * *", "2026-05-01") != seen_as("0 */6 * * *", "2026-05-02")
