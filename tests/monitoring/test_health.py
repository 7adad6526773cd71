"""Job health by the database clock, and jobclaims_status --check, which reports it."""

from __future__ import annotations

import datetime
import json
import os
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from jobclaims.models import JobRun
from jobclaims.monitoring.health import due_window, job_health
from jobclaims.time.clock import database_now
from tests.support.helpers import run_command, run_python
from tests.support.monitored import (
    DEAD,
    FAILING,
    HEALTHY,
    HOUR,
    HOURLY,
    OVERDUE,
    SCHEDULED,
    hour_start,
    make_monitored_jobs,
    save_run,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("deployed_now")]


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def test_the_due_window_is_the_newest_that_began_a_window_ago_by_default():
    due = due_window("hourly", at("2026-11-30T10:20+00:00"), None)
    assert due is not None
    assert (due.window, due.due_at) == ("2026-11-30T09:00+00:00", at("2026-11-30T09:00+00:00"))


def test_the_due_window_of_a_daily_job_with_a_grace_of_three_hours():
    due = due_window("daily", at("2026-11-30T02:59+00:00"), datetime.timedelta(hours=3))
    assert due is not None
    assert due.window == "2026-11-29"
    due = due_window("daily", at("2026-11-30T03:00+00:00"), datetime.timedelta(hours=3))
    assert due is not None
    assert due.window == "2026-11-30"


def test_the_due_window_of_a_fixed_window_is_its_bucket():
    due = due_window("90-second", at("2026-11-30T10:00:10+00:00"), None)
    assert due is not None
    assert due.due_at == at("2026-11-30T09:58:30+00:00")


def test_a_schedule_that_names_no_window_has_no_due_window():
    assert due_window("0-second", at("2026-11-30T10:00+00:00"), None) is None


def test_each_job_is_judged_healthy_overdue_failing_or_dead():
    make_monitored_jobs()
    health = {job.job: job for job in job_health() if not job.scheduled}
    assert sorted(health) == sorted([DEAD, FAILING, HEALTHY, OVERDUE])
    assert health[HEALTHY].healthy
    assert health[HEALTHY].problems == []

    overdue = health[OVERDUE]
    assert overdue.overdue is not None
    assert (overdue.failed, overdue.dead) == (None, [])
    assert overdue.overdue.due_at == hour_start(database_now()) - HOUR
    assert overdue.problems[0].startswith(f"overdue: the {overdue.overdue.window} window, due ")
    # Its last two hours' windows were never claimed: missed, as well as overdue.
    assert overdue.kinds == ["overdue", "missed"]

    failing = health[FAILING]
    assert (failing.overdue, failing.dead, failing.failures_in_a_row) == (None, [], 1)
    assert failing.failed is not None
    assert failing.problems == [
        f"failed: its last run, {failing.failed.window}, failed (1 in a row): "
        "RuntimeError: the payment provider is down"
    ]

    dead = health[DEAD]
    assert (dead.overdue, dead.failed) == (None, None)
    held = JobRun.objects.get(job=DEAD, status=JobRun.Status.RUNNING)
    assert [run.window for run in dead.dead] == [held.window]
    assert dead.problems[0].startswith("dead holder: the ")


def test_failures_in_a_row_count_back_to_the_last_success():
    this_hour = hour_start(database_now())
    save_run("flaky", this_hour - 4 * HOUR, JobRun.Status.FAILED)
    save_run("flaky", this_hour - 3 * HOUR, JobRun.Status.SUCCEEDED)
    for hours in (2, 1):
        save_run("flaky", this_hour - hours * HOUR, JobRun.Status.FAILED)
    [health] = job_health("flaky")
    assert health.failures_in_a_row == 2
    assert not health.healthy


def test_a_job_first_claimed_after_its_due_window_is_not_overdue():
    save_run("brand_new", hour_start(database_now()), JobRun.Status.SUCCEEDED)
    [health] = job_health("brand_new")
    assert health.healthy


def test_a_later_window_that_succeeded_makes_up_for_a_missed_due_window():
    this_hour = hour_start(database_now())
    save_run("caught_up", this_hour - 3 * HOUR, JobRun.Status.SUCCEEDED)
    save_run("caught_up", this_hour, JobRun.Status.SUCCEEDED)
    [health] = job_health("caught_up")
    assert health.overdue is None
    # The two windows between were never claimed: the missed signal still says so.
    assert health.kinds == ["missed"]


def test_a_backfill_of_an_old_window_does_not_make_up_for_the_due_one():
    this_hour = hour_start(database_now())
    save_run("backfilled", this_hour - 3 * HOUR, JobRun.Status.SUCCEEDED)
    old_window = HOURLY.key_at(this_hour - 5 * HOUR)
    save_run("backfilled", this_hour, JobRun.Status.SUCCEEDED, window=old_window)
    [health] = job_health("backfilled")
    assert health.overdue is not None


def test_a_grace_per_job_moves_the_due_window_back():
    make_monitored_jobs()
    with override_settings(JOBCLAIMS={"HEALTH_GRACE": {OVERDUE: 4 * HOUR}}):
        [health] = job_health(OVERDUE)
    assert health.overdue is None


def test_check_lists_the_unhealthy_jobs_and_exits_two():
    make_monitored_jobs()
    out, err, status = run_command("jobclaims_status", "--check")
    assert status == 1  # run_command's status for any CommandError; its code is below.
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines] == [DEAD, FAILING, OVERDUE, OVERDUE]
    assert lines[0].startswith(f"{DEAD}: dead holder: ")
    assert lines[1].startswith(f"{FAILING}: failed: ")
    assert lines[2].startswith(f"{OVERDUE}: overdue: ")
    assert lines[3].startswith(f"{OVERDUE}: missed: 2 of its windows in the last 1 d had no claim")
    assert err == f"3 of {4 + len(SCHEDULED)} jobs unhealthy"


def test_check_exits_with_nagios_critical():
    make_monitored_jobs()
    with pytest.raises(CommandError) as raised:
        call_command("jobclaims_status", "--check", "--job", OVERDUE, stdout=StringIO())
    assert raised.value.returncode == 2


def test_check_checks_every_job_named_by_a_repeated_job_option():
    make_monitored_jobs()
    for first, second in ((HEALTHY, FAILING), (FAILING, HEALTHY)):
        with pytest.raises(CommandError) as raised:
            call_command(
                "jobclaims_status",
                "--check",
                "--job",
                first,
                "--job",
                second,
                stdout=(out := StringIO()),
            )
        assert raised.value.returncode == 2
        assert str(raised.value) == "1 of 2 jobs unhealthy"
        assert [line.split(": ")[:2] for line in out.getvalue().splitlines()] == [
            [FAILING, "failed"]
        ]
    said, _, status = run_command("jobclaims_status", "--check", "--job", HEALTHY, "--job", HEALTHY)
    assert (said, status) == (f"{HEALTHY} is healthy.\n", 0)


def test_check_in_json_says_each_jobs_verdict_and_exits_as_the_text_does():
    make_monitored_jobs()
    with pytest.raises(CommandError) as raised:
        call_command(
            "jobclaims_status",
            "--check",
            "--json",
            "--job",
            HEALTHY,
            "--job",
            FAILING,
            stdout=(out := StringIO()),
        )
    assert raised.value.returncode == 2
    document = json.loads(out.getvalue())
    assert document["status"] == "unhealthy"
    by_job = {each["job"]: each for each in document["jobs"]}
    assert by_job[HEALTHY] == {"job": HEALTHY, "healthy": True, "problems": [], "said": []}
    assert by_job[FAILING]["problems"] == ["failed"]
    assert by_job[FAILING]["said"][0].startswith("failed: its last run, ")
    said, _, status = run_command("jobclaims_status", "--check", "--json", "--job", HEALTHY)
    assert (json.loads(said)["status"], status) == ("healthy", 0)
    with pytest.raises(CommandError) as raised:
        call_command(
            "jobclaims_status",
            "--check",
            "--json",
            "--job",
            "no_such_job",
            stdout=(out := StringIO()),
        )
    assert raised.value.returncode == 3
    unknown = json.loads(out.getvalue())
    assert unknown["status"] == "unknown"
    assert unknown["error"].startswith("'no_such_job' is not a known job; the known jobs are: ")


def test_an_option_error_is_unknown_to_a_monitor_not_critical():
    with pytest.raises(CommandError) as raised:
        call_command("jobclaims_status", "--check", "--limit", "ten", stdout=StringIO())
    assert raised.value.returncode == 3
    # From the command line, as a monitor runs it: argparse's usage, then 3.
    done = run_python(
        "import django; django.setup()\n"
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(['manage.py', 'jobclaims_status', '--check', '--jbo', 'x'])\n",
        env={"PYTHONPATH": os.getcwd()},
    )
    assert done.returncode == 3, done.stderr
    assert "error: unrecognized arguments: --jbo x" in done.stderr
    with pytest.raises(CommandError) as raised:
        call_command("jobclaims_status", "--job", HEALTHY, "--job", FAILING, stdout=StringIO())
    assert raised.value.returncode == 3
    assert str(raised.value) == "Error: --job may be given once without --check, not 2 times"


def test_check_of_healthy_jobs_exits_zero_and_is_silent_at_verbosity_zero():
    make_monitored_jobs()
    out, _, status = run_command("jobclaims_status", "--check", "--job", HEALTHY)
    assert (out, status) == (f"{HEALTHY} is healthy.\n", 0)
    out, _, status = run_command("jobclaims_status", "--check", "--job", HEALTHY, "-v", "0")
    assert (out, status) == ("", 0)


def test_a_timed_out_run_is_a_failure_that_health_names_and_a_cancelled_one_is_not():
    this_hour = hour_start(database_now())
    save_run("flaky", this_hour - 3 * HOUR, JobRun.Status.SUCCEEDED)
    save_run("flaky", this_hour - 2 * HOUR, JobRun.Status.FAILED)
    timed_out = save_run(
        "flaky", this_hour - HOUR, JobRun.Status.TIMED_OUT, error="Timed out after 0:30:00: ..."
    )
    [health] = job_health("flaky")
    assert health.failures_in_a_row == 2
    assert health.problems[-1] == (
        f"failed: its last run, {timed_out.window}, timed out (2 in a row): "
        "Timed out after 0:30:00: ..."
    )
    save_run("calm", this_hour - HOUR, JobRun.Status.CANCELLED)
    [calm] = job_health("calm")
    assert calm.failed is None
