"""Cron schedules: fire times, the window each claims, DST days, and bad schedules."""

from __future__ import annotations

import datetime
import json
import re
import zoneinfo

import pytest
from django.core.management import CommandError, ManagementUtility, call_command
from django.db import DEFAULT_DB_ALIAS
from django.test import override_settings

from jobclaims import checks
from jobclaims.jobs import discovery
from jobclaims.jobs.commands import JobCommand, Schedule
from jobclaims.jobs.schedules import ON_TIME, JobSchedule, Misfire, problems
from jobclaims.models import JobRun, JobSkip
from jobclaims.time.clock import database_now
from jobclaims.time.cron import CronSchedule
from tests.support import vixie
from tests.support.helpers import run_command

SECOND = datetime.timedelta(seconds=1)
HOUR = datetime.timedelta(hours=1)


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def keys_between(expression: str, start: str, end: str) -> list[str]:
    cron = CronSchedule(expression)
    return [cron.key(fire) for fire in cron.fires_between(at(start), at(end))]


def job_class(**attributes: object) -> type[JobCommand]:
    """A JobCommand subclass with ``attributes``, as if in a module named "nightly"."""
    return type("Command", (JobCommand,), {"__module__": "app.commands.nightly", **attributes})


def schedule_of(**attributes: object) -> JobSchedule:
    return JobSchedule.of(job_class(**attributes)(), "nightly")


@override_settings(TIME_ZONE="America/New_York")
def test_a_daily_job_at_a_time_spring_forward_skips_runs_once_that_day():
    keys = keys_between("30 2 * * *", "2026-03-07T12:00-05:00", "2026-03-09T12:00-04:00")
    # 02:30 does not exist on March 8: the fire is at 03:00, when the clocks jump.
    assert keys == ["2026-03-08T03:00-04:00", "2026-03-09T02:30-04:00"]


@override_settings(TIME_ZONE="America/New_York")
def test_a_daily_job_at_a_time_fall_back_repeats_runs_once_that_day():
    keys = keys_between("30 1 * * *", "2026-10-31T12:00-04:00", "2026-11-02T12:00-05:00")
    assert keys == ["2026-11-01T01:30-04:00", "2026-11-02T01:30-05:00"]


@override_settings(TIME_ZONE="America/New_York")
def test_an_hourly_job_fires_in_both_repeated_hours_with_a_key_each():
    keys = keys_between("30 * * * *", "2026-11-01T04:00+00:00", "2026-11-02T05:00+00:00")
    assert len(keys) == len(set(keys)) == 25
    assert keys[1:3] == ["2026-11-01T01:30-04:00", "2026-11-01T01:30-05:00"]


@override_settings(TIME_ZONE="America/New_York")
def test_an_hourly_job_skips_the_hour_spring_forward_removes():
    keys = keys_between("30 * * * *", "2026-03-08T05:00+00:00", "2026-03-09T04:00+00:00")
    assert len(keys) == len(set(keys)) == 23
    assert "2026-03-08T01:30-05:00" in keys
    assert "2026-03-08T03:30-04:00" in keys


def test_a_host_that_starts_late_claims_the_same_fire_as_one_on_time():
    job = schedule_of(schedule="*/15 * * * *")
    fire = at("2026-11-29T10:15+00:00")
    on_time, late, early = job.due(fire), job.due(fire + 7 * SECOND), job.due(fire - SECOND)
    assert on_time is not None
    assert late is not None
    assert early is not None
    assert job.slots.key_at(on_time) == job.slots.key_at(late) == "2026-11-29T10:15+00:00"
    assert job.slots.key_at(early) == "2026-11-29T10:00+00:00"


def test_a_quarter_hourly_job_has_four_windows_an_hour():
    keys = keys_between("*/15 * * * *", "2026-11-29T09:59+00:00", "2026-11-29T10:59+00:00")
    assert len(keys) == 4


def test_a_seconds_field_gives_keys_to_the_second():
    assert keys_between("*/2 * * * * *", "2026-11-29T10:00+00:00", "2026-11-29T10:00:05+00:00") == [
        "2026-11-29T10:00:02+00:00",
        "2026-11-29T10:00:04+00:00",
    ]


def test_an_operators_window_names_the_fire_it_falls_in_or_the_days_first():
    job = schedule_of(schedule="5 2,14 * * *")
    assert job.slots.key_for("2026-11-29T10:25") == "2026-11-29T02:05+00:00"
    assert job.slots.key_for("2026-11-29") == "2026-11-29T02:05+00:00"
    assert job.slots.key_for("2026-11-29T14:05:00+00:00") == "2026-11-29T14:05+00:00"
    with pytest.raises(ValueError, match="not an ISO 8601"):
        job.slots.key_for("yesterday")


def test_a_window_that_agrees_with_the_schedule_keeps_its_keys():
    job = schedule_of(schedule="5 2 * * *", window="daily")
    assert job.slots.key_at(at("2026-11-29T02:05+00:00")) == "2026-11-29"
    assert job.slots.recorded_schedule == "daily"


def test_the_misfire_policies_choose_which_late_fire_to_claim():
    fire = at("2026-11-29T00:00+00:00")
    late = fire + 3 * HOUR
    assert schedule_of(schedule="0 0 * * *", misfire=Misfire.SKIP).due(late) is None
    assert schedule_of(schedule="0 0 * * *", misfire=Misfire.SKIP).due(fire + ON_TIME) == fire
    assert schedule_of(schedule="0 0 * * *").due(late) == fire
    deadline = datetime.timedelta(hours=2)
    assert schedule_of(schedule="0 0 * * *", misfire_deadline=deadline).due(late) is None


def test_a_fire_whose_holder_vanished_is_judged_by_its_age_alone():
    """However many fires came after it, as a missed fire of its age is."""
    fire = at("2026-11-29T00:00+00:00")
    days_later = fire + 3 * 24 * HOUR
    assert schedule_of(schedule="0 0 * * *", misfire=Misfire.ALL).takes_over(fire, days_later)
    assert schedule_of(schedule="0 0 * * *").takes_over(fire, days_later)
    deadline = datetime.timedelta(hours=2)
    hourly = schedule_of(schedule="0 * * * *", misfire_deadline=deadline)
    assert hourly.takes_over(fire, fire + deadline)
    assert not hourly.takes_over(fire, fire + deadline + SECOND)
    skipping = schedule_of(schedule="* * * * *", misfire=Misfire.SKIP)
    assert skipping.takes_over(fire, fire + ON_TIME)
    assert not skipping.takes_over(fire, fire + ON_TIME + SECOND)


def test_a_key_names_the_fire_of_the_schedule_that_claims_it():
    job = schedule_of(schedule="5 2 * * *")
    assert job.fire_of("2026-11-29T02:05+00:00") == at("2026-11-29T02:05+00:00")
    assert job.fire_of("2026-11-29T02:06+00:00") is None
    assert job.fire_of("not a key") is None
    daily = schedule_of(schedule="5 2 * * *", window="daily")
    assert daily.fire_of("2026-11-29") == at("2026-11-29T02:05+00:00")


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"schedule": "61 * * * *"}, "nightly: schedule '61 \\* \\* \\* \\*' is not a cron"),
        ({"schedule": "5 2 * *"}, "has 4 fields; write five"),
        (
            {"schedule": "*/15 * * * *", "window": "hourly"},
            "contradicts window 'hourly'.*remove the window",
        ),
        ({"schedule": "5 2 * * *", "window": "fortnightly"}, "unknown window 'fortnightly'"),
        ({"schedule": "5 2 * * *", "misfire": "sometimes"}, "misfire 'sometimes' is not one of"),
    ],
)
def test_a_schedule_that_cannot_work_is_refused_naming_the_fix(attributes, message):
    (found,) = problems(job_class(**attributes))
    assert re.search(message, found)


def test_the_system_check_refuses_a_bad_schedule(monkeypatch):
    bad = job_class(schedule="*/15 * * * *", window="hourly")
    monkeypatch.setattr(discovery, "scheduled_commands", lambda: {"nightly": bad()})
    (warning,) = checks.check_schedules()
    assert warning.id == "jobclaims.W005"
    assert "contradicts window 'hourly'" in warning.msg
    # Django stops a command (migrate too) only on a serious message.
    assert not warning.is_serious()


def test_the_test_projects_scheduled_jobs_pass_the_check():
    assert checks.check_schedules() == []


@pytest.mark.django_db
def test_a_job_with_a_bad_schedule_refuses_to_run_and_writes_nothing():
    command = job_class(schedule="5 2 * * * * *", run_job=lambda self, run, **o: None)()
    with pytest.raises(CommandError, match="has 7 fields"):
        call_command(command)
    assert not JobRun.objects.exists()
    assert not JobSkip.objects.exists()


@pytest.mark.django_db
def test_the_scheduler_names_the_scheduled_jobs_for_an_unknown_one():
    _, err, status = run_command("jobclaims_scheduler", "--job", "nope", "--once")
    assert status == 1
    assert "'nope' is not a scheduled job; the scheduled jobs are: always_fails, nightly_all" in err
    assert not JobRun.objects.exists()
    assert not JobSkip.objects.exists()


@pytest.mark.django_db
def test_the_scheduler_refuses_to_start_with_a_bad_schedule(monkeypatch):
    bad = job_class(schedule="61 * * * *")
    monkeypatch.setattr(discovery, "scheduled_commands", lambda: {"nightly": bad()})
    _, err, status = run_command("jobclaims_scheduler", "--once")
    assert status == 1
    assert "is not a cron expression" in err
    assert not JobRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("chosen", [[], ["--job", "nightly_latest"]], ids=["all", "--job"])
def test_the_scheduler_leaves_out_a_job_with_a_bad_schedule_and_names_it(monkeypatch, chosen):
    good = discovery.scheduled_commands()["nightly_latest"]
    bad = job_class(schedule="61 * * * *")
    monkeypatch.setattr(
        discovery, "scheduled_commands", lambda: {"nightly": bad(), "nightly_latest": good}
    )
    out, err, status = run_command("jobclaims_scheduler", "--list", *chosen)
    assert status == 0, err
    assert out.startswith("nightly_latest: 0 0 * * *")
    (line,) = err.splitlines()
    assert line.startswith("nightly: schedule '61 * * * *' is not a cron expression")
    assert line.endswith("; this job is left out until it is fixed")
    _, err, status = run_command("jobclaims_scheduler", "--list", "--job", "nightly")
    assert status == 1
    assert "write it like '5 2 * * *' for 02:05 every day" in err


@pytest.mark.django_db
def test_the_status_command_shows_each_scheduled_job():
    out, _, status = run_command("jobclaims_status", "--schedules", "--job", "tick")
    assert status == 0
    assert "tick: */2 * * * * * (Every second second of every minute, UTC); misfire: latest" in out
    assert "  last run: none yet" in out
    assert "nightly" not in out


@pytest.mark.django_db
def test_the_status_command_marks_a_scheduled_job_whose_last_run_failed():
    tick = discovery.schedule_of("tick")
    assert tick is not None
    fire = tick.cron.latest_fire(database_now(DEFAULT_DB_ALIAS))
    assert fire is not None
    run = JobRun.objects.claim(
        "tick", tick.slots.key_at(fire), lease=HOUR, schedule=tick.slots.recorded_schedule
    )
    assert run is not None
    run.release(JobRun.Status.FAILED, error="ValueError: the ledger is closed")

    out, _, _ = run_command("jobclaims_status", "--schedules", "--job", "tick")
    document, _, _ = run_command("jobclaims_status", "--schedules", "--job", "tick", "--json")

    assert f"  last run: {run.window} failed (attempt 1)" in out
    assert "  ! failed: its last run" in out
    assert "ValueError: the ledger is closed" in out
    [listed] = json.loads(document)["schedules"]
    assert listed["job"] == "tick"
    assert listed["schedule"] == "*/2 * * * * *"
    assert listed["last_run"]["window"] == run.window
    assert listed["last_run"]["state"] == "failed"
    assert listed["healthy"] is False
    assert any("the ledger is closed" in problem for problem in listed["problems"])
    assert len(listed["next_fires"]) == 3


@pytest.mark.django_db
def test_a_scheduled_jobs_window_must_name_a_moment():
    _, err, status = run_command("tick", "--window", "yesterday")
    assert status == 1
    assert "--window: 'yesterday' is not an ISO 8601 date or date-time" in err
    assert not JobRun.objects.exists()


def test_the_scheduler_runs_at_least_one_job_at_once():
    with pytest.raises(CommandError, match="'0' is not a whole number of jobs above 0"):
        call_command("jobclaims_scheduler", "--max-jobs", "0")


UTC = datetime.timezone.utc


@override_settings(TIME_ZONE="UTC")
def test_the_parser_agrees_with_vixie_cron_over_a_year_for_generated_expressions():
    start = datetime.datetime(2027, 1, 1, tzinfo=UTC) - datetime.timedelta(microseconds=1)
    end = datetime.datetime(2028, 1, 1, tzinfo=UTC) - datetime.timedelta(microseconds=1)
    disagree = [
        expression
        for expression in vixie.expressions(seed=22, how_many=300, most_fires=5000)
        if CronSchedule(expression).fires_between(start, end) != list(vixie.fires(expression, 2027))
    ]
    assert disagree == []


@override_settings(TIME_ZONE="UTC")
@pytest.mark.parametrize(
    ("expression", "minutes"),
    [("30-30/15 * * * *", ["30", "30"]), ("10-10/5,30-30/15 * * * *", ["10", "30", "10", "30"])],
)
def test_a_one_value_range_with_a_step_fires_at_its_value_only(expression, minutes):
    keys = keys_between(expression, "2027-01-01T00:00+00:00", "2027-01-01T02:00+00:00")
    assert [key[14:16] for key in keys] == minutes


@override_settings(TIME_ZONE="UTC")
@pytest.mark.parametrize(
    ("nickname", "fields"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_each_cron_nickname_fires_as_the_fields_it_stands_for(nickname, fields):
    start, end = at("2026-12-31T23:59+00:00"), at("2027-12-31T23:59+00:00")
    fires = CronSchedule(nickname).fires_between(start, end)
    assert fires
    assert fires == list(vixie.fires(fields, 2027))
    assert problems(job_class(schedule=nickname)) == []


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("@reboot", "schedule '@reboot' names no time: a scheduler starts jobs at fire times"),
        ("@fortnightly", "is not a cron nickname; use one of @yearly, @annually"),
        ("", "schedule '' is empty; write a cron expression like '5 2 * * *', or leave "),
        ("   ", "schedule '   ' is empty"),
        ("daily", "schedule 'daily' has 1 fields; write five"),
        ("0 0 15W * *", "is not a cron expression (Bad day-of-month); write it like '5 2 * * *'"),
        ("0 0 ? * *", "with numbers, names (MON, JAN), ranges (1-5), steps (*/15, 0-30/10)"),
    ],
)
def test_a_schedule_cron_would_not_run_is_refused_naming_the_fix(schedule, message):
    (problem,) = problems(job_class(schedule=schedule))
    assert problem.startswith("nightly: ")
    assert message in problem


@pytest.mark.django_db
def test_a_job_with_an_empty_schedule_refuses_to_run_rather_than_go_unscheduled(monkeypatch):
    empty = job_class(schedule="", run_job=lambda self, run, **o: None)
    with pytest.raises(CommandError, match="schedule '' is empty"):
        call_command(empty())
    monkeypatch.setattr(discovery, "get_commands", lambda: {"nightly": empty()})
    assert list(discovery.scheduled_commands()) == ["nightly"]
    (error,) = checks.check_schedules()
    assert "schedule '' is empty" in error.msg
    assert not JobRun.objects.exists()


@pytest.mark.parametrize(
    ("zone", "night"), [("Europe/Berlin", "2027-03-28"), ("America/New_York", "2027-03-14")]
)
@pytest.mark.parametrize(
    "expression", ["30 2 * * *", "0 2 * * *", "59 2 * * *", "0 * * * *", "*/15 * * * *"]
)
def test_window_at_each_local_time_spring_forward_skips_names_that_nights_fire(
    zone, night, expression
):
    with override_settings(TIME_ZONE=zone):
        job = schedule_of(schedule=expression)
        day = datetime.date.fromisoformat(night)
        fires = job.cron.fires_between(
            at(f"{day - datetime.timedelta(days=1)}T00:00+00:00"), at(f"{night}T12:00+00:00")
        )
        for minute in range(60):
            text = f"{night}T02:{minute:02d}"
            # The docs' rule: the time is read with the offset before the
            # change (02:10 is 03:10 daylight time), and names the fire it
            # falls in: the latest at or before it.
            instant = datetime.datetime.fromisoformat(text).replace(
                tzinfo=zoneinfo.ZoneInfo(zone), fold=0
            )
            expected = max(fire for fire in fires if fire <= instant)
            key = job.slots.key_for(text)
            assert key == job.slots.key_at(expected), text
            # Every one of these has a fire at 03:00, when the clocks jump.
            assert key.startswith(f"{night}T03:"), text


@override_settings(TIME_ZONE="America/New_York")
def test_the_docs_new_york_example_names_the_hour_after_the_change():
    for expression in ("0 * * * *", "30 2 * * *"):
        key = schedule_of(schedule=expression).slots.key_for("2026-03-08T02:30")
        assert key == "2026-03-08T03:00-04:00", expression


@pytest.mark.parametrize(
    ("expression", "window", "problem"),
    [
        # Passed when the check looked 400 days ahead from 2026: February 2029's two
        # fires share a 31-day bucket.
        ("0 0 1 * *", datetime.timedelta(days=31), "fires can come 28 days, 0:00:00 apart"),
        ("0 0 29 2 *", datetime.timedelta(days=1462), "fires can come 1461 days, 0:00:00 apart"),
        ("0 9,17 * * 1-5", 9 * HOUR, "(like 01 January 09:00:00 and 01 January 17:00:00)"),
        ("*/15 * * * *", 16 * 60 * SECOND, "or make it at most 0:15:00"),
    ],
)
def test_a_fixed_window_longer_than_the_shortest_gap_between_fires_is_refused(
    expression, window, problem
):
    (found,) = problems(job_class(schedule=expression, window=window))
    assert f"schedule {expression!r} contradicts window {window!r}" in found
    assert problem in found


@pytest.mark.parametrize(
    ("expression", "window"),
    [
        ("0 0 1 * *", datetime.timedelta(days=28)),
        ("0 0 29 2 *", datetime.timedelta(days=1461)),
        ("0 9,17 * * 1-5", 8 * HOUR),
        ("*/15 * * * *", 15 * 60 * SECOND),
    ],
)
def test_a_fixed_window_no_longer_than_the_shortest_gap_passes(expression, window):
    assert problems(job_class(schedule=expression, window=window)) == []


@override_settings(TIME_ZONE="America/New_York")
def test_a_fixed_window_leaves_room_for_the_change_of_offset_at_set_local_times():
    (found,) = problems(job_class(schedule="30 2 * * *", window=24 * HOUR))
    assert "less the 1:00:00 a change of UTC offset in America/New_York can take" in found
    assert "or make it at most 23:00:00" in found
    assert problems(job_class(schedule="30 2 * * *", window=23 * HOUR)) == []
    # An expression with * in its minute or hour fields skips what the change skips.
    assert problems(job_class(schedule="*/15 * * * *", window=15 * 60 * SECOND)) == []


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        (
            {"misfire_deadline": 30 * SECOND},
            "misfire_deadline 0:00:30 is shorter than the 60 seconds a fire may be late",
        ),
        (
            {"misfire_deadline": 3600},
            "misfire_deadline must be a positive datetime.timedelta, or None for no deadline, "
            "not 3600",
        ),
        (
            {"misfire": "skip", "misfire_deadline": HOUR},
            "misfire = 'skip' runs none; remove the deadline, or set misfire = 'latest'",
        ),
        (
            {"lease": -5 * SECOND},
            "lease must be a positive datetime.timedelta, not datetime.timedelta(days=-1, ",
        ),
    ],
)
def test_a_misfire_deadline_or_lease_the_job_cannot_honour_is_refused(attributes, problem):
    (found,) = problems(job_class(schedule="5 2 * * *", **attributes))
    assert found.startswith("nightly: ")
    assert problem in found


def test_a_misfire_deadline_is_honoured_to_the_second():
    job = schedule_of(schedule="0 * * * *", misfire_deadline=90 * SECOND)
    fire = at("2026-11-29T10:00+00:00")
    assert job.due(fire + 90 * SECOND) == fire
    assert job.due(fire + 91 * SECOND) is None


@pytest.mark.django_db
def test_status_check_reports_a_job_with_a_bad_schedule_critical(monkeypatch, capsys):
    bad = job_class(schedule="61 * * * *")
    monkeypatch.setattr(discovery, "scheduled_commands", lambda: {"nightly": bad()})
    # As manage.py runs it, system checks included.
    with pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "jobclaims_status", "--check"]).execute()
    assert exited.value.code == 2
    assert "nightly: schedule '61 * * * *' is not a cron expression" in capsys.readouterr().out


@pytest.mark.parametrize("grace", ["-1", "nan", "86400", "soon"])
def test_the_schedulers_grace_is_a_number_of_seconds_from_0_to_under_a_day(grace):
    message = "not a number of seconds" if grace == "soon" else "0 seconds or more and under a day"
    with pytest.raises(CommandError, match=message):
        call_command("jobclaims_scheduler", "--grace", grace)


# A time zone per schedule, several schedules per job, and jitter.

#: Expressions whose fires daylight-saving changes move, skip or repeat.
_ACROSS_CHANGES = ["30 2 * * *", "30 1 * * *", "0 2 * * *", "30 * * * *", "*/20 1-3 * * *"]


@pytest.mark.parametrize("expression", _ACROSS_CHANGES)
@pytest.mark.parametrize(
    ("start", "end"), [("2026-03-07", "2026-03-10"), ("2026-10-31", "2026-11-03")]
)
def test_a_schedule_in_its_own_zone_keys_fires_as_that_zone_as_time_zone_would(
    expression, start, end
):
    span = at(f"{start}T00:00+00:00"), at(f"{end}T00:00+00:00")
    with override_settings(TIME_ZONE="America/New_York"):
        project = schedule_of(schedule=expression)
        expected = [key for _, key in project.slots.fires_between(*span)]
    with override_settings(TIME_ZONE="Asia/Tokyo"):
        own = schedule_of(schedule=expression, time_zone="America/New_York")
        keys = [key for _, key in own.slots.fires_between(*span)]
        assert own.time_zone == "America/New_York"
    assert keys == expected
    # One key per instant, and each key names its instant.
    assert len({at(key) for key in keys}) == len(keys)


@override_settings(TIME_ZONE="UTC")
def test_a_schedule_in_new_york_runs_once_on_both_nights_its_clocks_change():
    daily = schedule_of(schedule="30 2 * * *", time_zone="America/New_York")
    spring = daily.slots.fires_between(at("2026-03-07T12:00+00:00"), at("2026-03-09T12:00+00:00"))
    # 02:30 does not exist on March 8 in New York: the fire is at 03:00 there.
    assert [key for _, key in spring] == ["2026-03-08T03:00-04:00", "2026-03-09T02:30-04:00"]
    repeated = schedule_of(schedule="30 1 * * *", time_zone="America/New_York")
    fall = repeated.slots.fires_between(at("2026-10-31T12:00+00:00"), at("2026-11-02T12:00+00:00"))
    assert [key for _, key in fall] == ["2026-11-01T01:30-04:00", "2026-11-02T01:30-05:00"]
    # An operator's --window is a wall time in the schedule's zone.
    assert daily.slots.key_for("2026-03-08") == "2026-03-08T03:00-04:00"
    assert repeated.slots.key_for("2026-11-01T01:45") == "2026-11-01T01:30-04:00"


def test_a_time_zone_the_tz_database_does_not_know_is_refused_naming_the_fix():
    (problem,) = problems(job_class(schedule="0 2 * * *", time_zone="America/New_Yrok"))
    assert problem.startswith("nightly: time_zone 'America/New_Yrok' is not a time zone")
    assert "like 'America/New_York'" in problem
    listed = job_class(schedules=[Schedule("0 2 * * *", time_zone="Mars/Olympus")])
    (problem,) = problems(listed)
    assert "time_zone 'Mars/Olympus'" in problem


def test_a_time_zone_with_a_calendar_window_of_the_project_zone_is_refused():
    (problem,) = problems(
        job_class(schedule="0 2 * * *", time_zone="America/New_York", window="daily")
    )
    assert "time_zone 'America/New_York' and window 'daily' disagree" in problem


def test_each_schedule_claims_under_its_own_name_whatever_its_place_in_the_list():
    eu = Schedule("0 * * * *", args=["--region", "eu"])
    us = Schedule("30 * * * *", args=["--region", "us"], time_zone="America/New_York")
    named = Schedule("15 * * * *", name="weekly report")
    first = JobSchedule.each_of(job_class(schedules=[eu, us, named])(), "nightly")
    again = JobSchedule.each_of(job_class(schedules=[named, us, eu])(), "nightly")
    assert (
        sorted(job.job for job in first)
        == sorted(job.job for job in again)
        == [
            "nightly[--region eu]",
            "nightly[--region us]",
            "nightly[weekly report]",
        ]
    )
    by_name = {job.job: job for job in first}
    assert by_name["nightly[--region us]"].args == ("--region", "us")
    assert by_name["nightly[--region us]"].time_zone == "America/New_York"
    # A job with one schedule keeps its own name, and its keys.
    single = schedule_of(schedule="0 * * * *")
    assert (single.job, single.name) == ("nightly", "")


def test_schedules_that_would_share_their_claims_are_refused_naming_the_fix():
    twice = job_class(schedules=[Schedule("0 9 * * 1-5"), Schedule("0 9 * * 1-5")])
    assert problems(twice) == [
        "nightly: two of its schedules are named '0 9 * * 1-5', so they would share "
        "their claims; give each its own name=, or its own args"
    ]
    both = job_class(schedule="0 * * * *", schedules=[Schedule("0 * * * *")])
    assert "set schedule or schedules, not both" in problems(both)[0]
    strings = job_class(schedules=["0 * * * *"])
    assert "schedules must be a list of jobclaims.Schedule" in problems(strings)[0]
    one = job_class(
        schedules=[Schedule("0 9 * * *", name="morning"), Schedule("0  9 * * *", name="daily")]
    )
    assert problems(one) == [
        "nightly: its schedules 'morning' and 'daily' are one schedule (the same expression, "
        "time zone and arguments), so they would share their fires; remove one of them"
    ]


def test_a_schedules_series_stays_through_a_rename_and_tells_schedules_apart():
    eu = Schedule("0 * * * *", args=["--region", "eu"])
    before = JobSchedule.each_of(job_class(schedules=[eu])(), "nightly")
    named = Schedule("0 * * * *", args=["--region", "eu"], name="eu")
    after = JobSchedule.each_of(job_class(schedules=[named], job_name="renamed")(), "nightly")
    one = JobSchedule.each_of(job_class(schedule="0 * * * *")(), "nightly")
    assert [job.job for job in before + after] == ["nightly[--region eu]", "renamed[eu]"]
    assert before[0].series == after[0].series
    assert one[0].series not in (before[0].series, schedule_of(schedule="30 * * * *").series)


def test_jitter_as_long_as_the_gap_between_two_fires_is_refused():
    assert problems(job_class(schedule="*/5 * * * *", jitter=datetime.timedelta(minutes=4))) == []
    (problem,) = problems(job_class(schedule="*/5 * * * *", jitter=datetime.timedelta(minutes=5)))
    assert "jitter 0:05:00 is not shorter than the 0:05:00 between two fires" in problem
    (problem,) = problems(job_class(schedule="0 * * * *", jitter=datetime.timedelta()))
    assert "jitter must be a positive datetime.timedelta, or None for no jitter" in problem


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        (
            {"overlap": "bufer"},
            "overlap 'bufer' is not one of 'skip', 'allow', 'buffer', 'replace'",
        ),
        (
            {"overlap": "buffer", "allow_overlap": True},
            "overlap 'buffer' and allow_overlap = True disagree; remove allow_overlap",
        ),
        (
            {"overlap": "replace", "misfire": "all"},
            "overlap 'replace' and misfire = 'all' disagree: 'all' already runs each fire",
        ),
        (
            {"schedules": [Schedule("0 * * * *", name="a", overlap="later")]},
            "overlap 'later' is not one of",
        ),
    ],
)
def test_an_overlap_policy_that_cannot_work_is_refused_naming_the_fix(attributes, problem):
    (found,) = problems(
        job_class(schedule=None if "schedules" in attributes else "0 * * * *", **attributes)
    )
    assert found.startswith(f"nightly: {problem}"), found


def test_a_schedules_own_overlap_policy_wins_over_its_jobs():
    job = job_class(
        overlap="buffer",
        schedules=[
            Schedule("0 * * * *", name="a"),
            Schedule("30 * * * *", name="b", overlap="allow"),
        ],
    )
    first, second = JobSchedule.each_of(job(), "nightly")
    assert (first.overlap, first.allow_overlap) == ("buffer", False)
    assert (second.overlap, second.allow_overlap) == ("allow", True)
    assert schedule_of(schedule="0 * * * *", allow_overlap=True).overlap == "allow"
    assert schedule_of(schedule="0 * * * *").overlap == "skip"
