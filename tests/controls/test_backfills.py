"""Running a job now and backfilling a range by hand: each window is claimed as usual."""

from __future__ import annotations

import datetime
import os
import re
import signal
from collections import Counter

import pytest

from jobclaims.controls import backfills, pauses
from jobclaims.jobs.discovery import scheduled_jobs
from jobclaims.models import JobRun, JobSkip
from jobclaims.testing import assert_ran_once, race, start
from jobclaims.time.clock import database_now
from jobclaims.time.windows import resolve
from tests.support.helpers import commands_named, run_command, wait_until
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = datetime.timedelta(hours=1)
HOURLY = resolve("hourly")
#: Ten hourly windows, both ends included.
FROM, TO = "2026-11-20T00:00", "2026-11-20T09:00"
TEN_HOURS = [f"2026-11-20T{hour:02d}:00+00:00" for hour in range(10)]


def charged(job: str = "charge_backfilled") -> Counter[str]:
    return Counter(Charge.objects.filter(job=job).values_list("window", flat=True))


def test_run_now_runs_the_current_window_once_and_then_skips_it():
    out, err, status = run_command("jobclaims_run", "charge_backfilled")
    assert status == 0, err
    current = HOURLY.key_at(database_now())
    assert f"Ran charge_backfilled {current}." in out
    out, _, status = run_command("jobclaims_run", "charge_backfilled")
    assert status == 0
    assert f"Skipped charge_backfilled {current}: it already succeeded at " in out
    assert charged() == {current: 1}


def test_run_now_from_two_processes_at_the_same_instant_runs_once():
    results = race("jobclaims_run", "charge_backfilled", instances=2, env={"CHARGE_HOLD": "0.5"})
    assert_ran_once(results)
    assert list(charged().values()) == [1]


def test_a_backfill_runs_each_window_of_the_range_oldest_first():
    out, err, status = run_command("jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO)
    assert status == 0, err
    assert charged() == dict.fromkeys(TEN_HOURS, 1)
    claimed = JobRun.objects.filter(job="charge_backfilled").order_by("claimed_at", "pk")
    assert [run.window for run in claimed] == TEN_HOURS
    assert out.endswith("\ncharge_backfilled: 10 of 10 windows ran here.\n")


def test_a_backfill_skips_the_windows_done_already_unless_forced():
    run_command("jobclaims_run", "charge_backfilled", "--from", FROM, "--to", "2026-11-20T01:00")
    out, _, _ = run_command("jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO)
    assert "8 of 10 windows ran here; 2 had succeeded already (--force runs them again)." in out
    assert f"Skipped charge_backfilled {TEN_HOURS[0]}: it already succeeded at " in out
    run_command("jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO, "--force")
    assert charged() == dict.fromkeys(TEN_HOURS, 2)


def test_a_range_longer_than_its_bound_is_refused_naming_the_commands_that_run_it_in_parts():
    fixes = [
        ["jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO, "--max-windows", "3"]
    ]
    refusals = 0
    while fixes:
        _, err, status = run_command(*fixes.pop(0))
        if status:
            assert "charge_backfilled has more than 3 windows from " in err
            assert ", so none was run; run the first 3 with manage.py jobclaims_run " in err
            refusals += 1
            first, rest = commands_named(err)
            fixes[:0] = [first, rest]
    # The fixes, followed: 3 windows, then 3, then 3, then the last, once each.
    assert refusals == 3
    assert charged() == dict.fromkeys(TEN_HOURS, 1)


def test_a_long_range_tells_its_progress(monkeypatch):
    monkeypatch.setattr(backfills, "PROGRESS_EVERY", 0.0)
    out, err, status = run_command("jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO)
    assert status == 0, err
    assert re.search(r"^charge_backfilled: 9 of 10 windows done in 0:00:\d\d, about ", out, re.M)


def test_a_backfill_stopped_by_sigterm_says_what_it_did():
    # In a window's run: the run is recorded interrupted, and the range stops.
    [backfill] = start(
        "jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO, env={"CHARGE_HOLD": "30"}
    )
    wait_until(Charge.objects.exists, "the first window to run")
    backfill.process.send_signal(signal.SIGTERM)
    result = backfill.finish()
    assert result.returncode == 128 + signal.SIGTERM, result
    assert result.stdout.endswith(
        "charge_backfilled: 0 of 10 windows ran here; 10 not run, as SIGTERM stopped a "
        "window's run.\n"
    ), result
    assert "was interrupted by SIGTERM; its claim is released as failed" in result.stderr
    # Between two windows (one waits for a run of another): the range stops there.
    JobRun.objects.claim("charge_backfilled", "2026-11-19T00:00+00:00", lease=HOUR)
    [backfill] = start("jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO)
    wait_until(JobSkip.objects.filter(reason="overlap").exists, "the range to wait")
    backfill.process.send_signal(signal.SIGTERM)
    result = backfill.finish()
    assert result.returncode == 128 + signal.SIGTERM, result
    assert result.stdout.endswith(
        "charge_backfilled: 0 of 10 windows ran here; 10 not run, as SIGTERM stopped the range.\n"
    ), result
    assert "interrupted by SIGTERM between two windows, so no later window was run" in (
        result.stderr
    )


def test_two_backfills_of_the_same_range_at_once_run_each_window_once():
    results = race(
        "jobclaims_run",
        "charge_backfilled",
        "--from",
        FROM,
        "--to",
        TO,
        instances=2,
        env={"CHARGE_HOLD": "0.2"},
    )
    assert [result.returncode for result in results] == [0, 0], results
    assert charged() == dict.fromkeys(TEN_HOURS, 1)
    assert set(JobRun.objects.values_list("status", flat=True)) == {JobRun.Status.SUCCEEDED}


def test_a_scheduled_job_is_backfilled_over_its_fires():
    _, err, status = run_command(
        "jobclaims_run", "nightly_latest", "--from", "2026-11-20", "--to", "2026-11-29"
    )
    assert status == 0, err
    nights = [f"2026-11-{day}T00:00+00:00" for day in range(20, 30)]
    assert charged("nightly_latest") == dict.fromkeys(nights, 1)


@pytest.mark.xdist_group("fleets")
def test_a_backfill_while_three_schedulers_run_the_job_runs_each_fire_once():
    hosts = start("jobclaims_scheduler", "--job", "tick", instances=3)
    try:
        wait_until(lambda: Charge.objects.filter(job="tick").exists(), "a scheduler to run tick")
        # Ten fires of two seconds, the newest of them run by the schedulers.
        end = database_now()
        start_at = end - datetime.timedelta(seconds=19)
        _, err, status = run_command(
            "jobclaims_run", "tick", "--from", start_at.isoformat(), "--to", end.isoformat()
        )
        assert status == 0, err
        tick = next(job for job in scheduled_jobs() if job.job == "tick")
        fires = [key for _, key in tick.slots.fires_between(start_at, end)]
        # A scheduler's child may take long to start on a busy machine.
        wait_until(lambda: set(fires) <= set(charged("tick")), "every fire of the range to run", 90)
        for host in hosts:
            host.process.send_signal(signal.SIGTERM)
        results = [host.finish(timeout=30) for host in hosts]
    finally:
        for host in hosts:
            host.stop()
    assert [result.returncode for result in results] == [0, 0, 0], results
    assert len(fires) >= 9
    assert set(charged("tick").values()) == {1}


def test_a_backfill_stops_at_a_paused_job_and_says_how_to_go_on():
    pauses.pause("charge_backfilled", by="alice", reason="vendor down")
    out, err, status = run_command("jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO)
    assert status == 0, err
    assert f"Stopped before charge_backfilled {TEN_HOURS[0]}: paused by alice at " in out
    assert "resume it with manage.py jobclaims_resume charge_backfilled, then run this again" in out
    assert not Charge.objects.exists()
    assert JobSkip.objects.get().reason == "paused"


def test_a_backfill_stops_at_the_first_window_that_fails(monkeypatch):
    monkeypatch.setitem(os.environ, "CHARGE_FAIL_WINDOW", TEN_HOURS[3])
    _, err, status = run_command("jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO)
    assert status == 1
    assert f"charge_backfilled failed in {TEN_HOURS[3]}: the payment provider is down" in err
    assert "run the same command again to retry it and go on" in err
    assert sorted(charged()) == TEN_HOURS[:4]
    assert JobRun.objects.get(window=TEN_HOURS[3]).status == JobRun.Status.FAILED
    monkeypatch.delitem(os.environ, "CHARGE_FAIL_WINDOW")
    run_command("jobclaims_run", "charge_backfilled", "--from", FROM, "--to", TO)
    assert charged() == {**dict.fromkeys(TEN_HOURS, 1), TEN_HOURS[3]: 2}


def test_an_unknown_job_is_refused_naming_the_job_commands_and_nothing_is_written():
    _, err, status = run_command("jobclaims_run", "charge_backfiled")
    assert status == 1
    assert "no job command is named 'charge_backfiled'; name one of: " in err
    assert "charge_backfilled" in err
    assert not JobRun.objects.exists()
    assert not JobSkip.objects.exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--to", TO], "--to needs --from: give the first window of the range too"),
        (["--from", TO, "--to", FROM], "is before --from"),
        (["--from", FROM, "--to", "2999-01-01"], "has not come yet by the database clock"),
        (["--from", "yesterday"], "'yesterday' is not an ISO 8601 date or date-time"),
        (["--from", "2999-01-01"], "--from 2999-01-01T00:00:00+00:00 has not come yet by"),
    ],
)
def test_a_bad_range_is_refused_naming_the_fix_and_nothing_is_written(arguments, message):
    _, err, status = run_command("jobclaims_run", "charge_backfilled", *arguments)
    assert status == 1
    assert message in err
    assert not JobRun.objects.exists()


def test_a_backfill_of_one_schedule_of_several_runs_its_fires_with_its_arguments(monkeypatch):
    monkeypatch.setenv("SYNC_HOLD", "0")
    _, err, status = run_command(
        "jobclaims_run",
        "sync_regions[--region us]",
        "--from",
        "2026-11-20T00:00:00",
        "--to",
        "2026-11-20T00:00:06",
    )
    assert status == 0, err
    # Its range read in its own zone, as --window is; its fires keyed there,
    # each run once with its own region.
    keys = ["2026-11-20T00:00-05:00", "2026-11-20T00:00:03-05:00", "2026-11-20T00:00:06-05:00"]
    assert charged("us") == dict.fromkeys(keys, 1)
    assert set(JobRun.objects.values_list("job", flat=True)) == {"sync_regions[--region us]"}


def test_a_job_of_several_schedules_run_without_one_names_the_command_that_runs_one(
    monkeypatch,
):
    monkeypatch.setenv("SYNC_HOLD", "0")
    for started in (["jobclaims_run", "sync_regions"], ["sync_regions"]):
        _, err, status = run_command(*started)
        assert status == 1
        assert (
            "sync_regions has several schedules, each with its own claims; run the one you "
            "mean with manage.py jobclaims_run 'sync_regions[--region eu]' or manage.py "
            "jobclaims_run 'sync_regions[--region us]'"
        ) in err
    # The fix, followed: each named command runs its schedule, with its arguments.
    for command in commands_named(err):
        _, said, status = run_command(*command)
        assert status == 0, said
    assert set(Charge.objects.values_list("job", flat=True)) == {"eu", "us"}


def test_a_range_ending_in_the_future_runs_as_its_message_says_with_to_left_out():
    recent = (database_now() - HOUR).isoformat()
    _, err, status = run_command(
        "jobclaims_run", "charge_backfilled", "--from", recent, "--to", "2999-01-01"
    )
    assert status == 1
    assert "has not come yet by the database clock; leave --to out to end the range now" in err
    _, err, status = run_command("jobclaims_run", "charge_backfilled", "--from", recent)
    assert status == 0, err
    assert len(charged()) == 2  # The hour before, and this one.
