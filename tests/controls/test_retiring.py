"""Retiring a job removed or renamed in the code: ``jobclaims_retire`` and
the admin action take it out of ``--check``, the health page and the
metrics, keep its claims, and record who retired it, when and why; a
scheduled job gone from the code is left out by itself, and reported gone."""

from __future__ import annotations

import datetime
import getpass
import json
import signal

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.db.models import F
from django.test import override_settings

from jobclaims.models import JobRun, KnownCommand, RetiredJob, SchedulerSeen, ScheduleVersion
from jobclaims.monitoring.health import job_health, read_health
from jobclaims.testing import race, start
from jobclaims.time.clock import database_now
from tests.admin.test_admin import act, client_for, staff
from tests.contrib.test_prometheus import scrape, value
from tests.monitoring.test_health_schedules import verdicts
from tests.support.helpers import run_command, wait_until
from tests.support.monitored import (
    HEALTHY,
    HOUR,
    OVERDUE,
    SCHEDULED,
    SECOND,
    hour_start,
    make_monitored_jobs,
    save_run,
)
from tests.testapp.models import Charge

MINUTE = datetime.timedelta(minutes=1)
DAY = datetime.timedelta(days=1)

# The health page's check reads in a thread of its own: committed rows only.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("deployed_now")]

#: The overdue job of tests/support/monitored.py, as if renamed in the code.
GONE = OVERDUE


def only_the_overdue_job() -> None:
    """The monitored jobs, less all but the overdue one and the healthy one."""
    make_monitored_jobs()
    JobRun.objects.exclude(job__in=[GONE, HEALTHY]).delete()


def test_a_retired_job_is_no_longer_overdue_and_its_claims_stay(client):
    only_the_overdue_job()
    assert verdicts(client) == {GONE: {"overdue", "missed"}}
    claims = JobRun.objects.filter(job=GONE).count()

    out, err, status = run_command("jobclaims_retire", GONE, "--reason", "renamed to send_digest")
    assert (status, err) == (0, "")
    assert out == f"Retired {GONE}: health no longer watches it, until it is claimed again.\n"

    assert verdicts(client) == {}
    assert JobRun.objects.filter(job=GONE).count() == claims
    retired = RetiredJob.objects.get()
    assert (retired.job, retired.retired_by, retired.reason) == (
        GONE,
        getpass.getuser(),
        "renamed to send_digest",
    )
    assert abs(retired.retired_at - database_now()) < 60 * SECOND


def test_retiring_an_unknown_job_names_the_known_ones_and_writes_nothing():
    only_the_overdue_job()
    _out, err, status = run_command("jobclaims_retire", "send_digset")
    assert status == 1
    assert "no job is named 'send_digset'; name one of: " in err
    assert GONE in err
    assert not RetiredJob.objects.exists()


def test_a_claim_after_its_retirement_brings_a_job_back_under_watch(client):
    only_the_overdue_job()
    run_command("jobclaims_retire", GONE)
    assert verdicts(client) == {}
    # Run again (the rename was reverted): its run fails, and health says so.
    save_run(GONE, database_now(), JobRun.Status.FAILED, error="boom")
    assert "failed" in verdicts(client)[GONE]


def test_the_admin_action_retires_the_selected_claims_jobs_and_records_who(client):
    only_the_overdue_job()
    operator = staff("view_jobrun", "change_jobrun")
    response = act(client_for(operator), "retire_jobs", *JobRun.objects.filter(job=GONE))
    assert response.status_code == 302

    assert verdicts(client) == {}
    retired = RetiredJob.objects.get()
    assert (retired.job, retired.retired_by) == (GONE, operator.get_username())
    entry = LogEntry.objects.get()
    assert (entry.user, entry.action_flag, entry.object_repr) == (operator, ADDITION, GONE)


#: A job an earlier deploy scheduled, renamed since: in no JobCommand of this code.
RENAMED = "send_digest"
#: The deploy before the rename: tests/testapp's "rescheduled" job under the old name.
OLD_CODE = {
    "RESCHEDULED_SCHEDULE": "*/2 * * * * *",
    "RESCHEDULED_MISFIRE": "latest",
    "RESCHEDULED_JOB_NAME": RENAMED,
}


def scheduled_by_an_earlier_deploy() -> JobRun:
    """An hourly claim of ``RENAMED`` three hours ago, and the schedule a
    scheduler recorded for it then: watched, it would be overdue and missed."""
    now = database_now()
    ScheduleVersion.objects.create(
        job=RENAMED, fingerprint="0123456789abcdef", schedule="0 * * * *", since=now - 30 * DAY
    )
    return save_run(RENAMED, hour_start(now) - 3 * HOUR + SECOND, JobRun.Status.SUCCEEDED)


def test_a_job_gone_from_the_code_is_not_watched_and_is_reported_gone(client):
    only_the_overdue_job()
    run = scheduled_by_an_earlier_deploy()

    # The overdue job was claimed through claim(): the code cannot list
    # such jobs, so it is never taken for gone.
    assert verdicts(client) == {GONE: {"overdue", "missed"}}
    health = read_health()
    assert [(each.job, each.last_claimed, each.schedule) for each in health.gone] == [
        (RENAMED, run.claimed_at, "0 * * * *")
    ]
    assert RENAMED not in {each.job for each in health.jobs}
    scraped = scrape(client)
    assert value(scraped, "jobclaims_job_gone", job_name=RENAMED) == 1
    assert value(scraped, "jobclaims_missed_runs", job_name=RENAMED) is None

    out, _err, _status = run_command("jobclaims_status")
    assert f"{RENAMED}: gone from the code: no JobCommand and no live scheduler runs it" in out
    out, _err, _status = run_command("jobclaims_status", "--json")
    [gone] = json.loads(out)["gone_jobs"]
    assert (gone["job"], gone["schedule"]) == (RENAMED, "0 * * * *")

    run_command("jobclaims_retire", GONE)
    out, _err, status = run_command("jobclaims_status", "--check")
    healthy = len(SCHEDULED) + 1  # And the healthy job.
    assert (out, status) == (f"All {healthy} jobs healthy; {RENAMED} is gone from the code.\n", 0)
    # Nothing was written: its claims stay, and no one retired it.
    assert JobRun.objects.filter(job=RENAMED).get() == run
    assert not RetiredJob.objects.filter(job=RENAMED).exists()


def test_a_job_that_a_live_scheduler_still_runs_is_watched_in_a_rolling_deploy(client):
    scheduled_by_an_earlier_deploy()
    now = database_now()
    # A host still on the old code: its scheduler runs the job.
    old_host = SchedulerSeen.objects.create(
        host="web-2", pid=7, schedules={RENAMED: "0 * * * *"}, fingerprint="-", started_at=now
    )
    assert verdicts(client) == {RENAMED: {"overdue", "missed"}}
    assert read_health().gone == []

    # The last old host stopped: past the grace, the job is gone.
    SchedulerSeen.objects.filter(pk=old_host.pk).update(last_seen_at=now - 10 * MINUTE)
    assert verdicts(client) == {}
    assert [each.job for each in read_health().gone] == [RENAMED]


def test_a_run_of_a_gone_job_still_holding_its_lease_keeps_it_watched(client):
    scheduled_by_an_earlier_deploy()
    now = database_now()
    save_run(RENAMED, now, JobRun.Status.RUNNING, expires_at=now + 10 * MINUTE)
    assert RENAMED in verdicts(client)
    assert read_health().gone == []


def test_a_renamed_jobs_scheduler_stopping_makes_it_gone_and_starting_again_brings_it_back(
    client,
):
    """Real schedulers of the deploy before the rename; health runs with
    this code, which has no job of that name."""
    [host] = start("jobclaims_scheduler", "--job", "rescheduled", env=OLD_CODE)
    try:
        wait_until(lambda: Charge.objects.filter(job=RENAMED).exists(), "a fire of the old job")
        # Watched while an old host runs it.
        assert [each.job for each in job_health(RENAMED)] == [RENAMED]
        assert read_health().gone == []
        host.process.send_signal(signal.SIGTERM)
        assert host.finish(timeout=30).returncode == 0
    finally:
        host.stop()
    # Stopped, but within the scheduler grace: it may be a host restarting.
    assert read_health().gone == []
    with override_settings(JOBCLAIMS={"SCHEDULER_GRACE": SECOND}):
        stopped = database_now()
        wait_until(lambda: database_now() > stopped + 2 * SECOND, "the grace to pass")
        assert [each.job for each in read_health().gone] == [RENAMED]
        # Not judged; the code's own scheduled jobs, which no scheduler runs, are.
        found = verdicts(client)
        assert RENAMED not in found
        assert all(kinds == {"no live scheduler"} for kinds in found.values()), found
        assert value(scrape(client), "jobclaims_job_gone", job_name=RENAMED) == 1

    # Code that has the job (the rename reverted) watches it: not gone there.
    (check,) = start("jobclaims_status", "--check", env=OLD_CODE)
    result = check.finish(timeout=120)
    assert result.stdout.startswith("All "), result
    assert "gone" not in result.stdout

    # A scheduler of the old code again (a rollback): watched again here too.
    [host] = start("jobclaims_scheduler", "--job", "rescheduled", env=OLD_CODE)
    try:
        wait_until(
            lambda: SchedulerSeen.objects.filter(pid=host.process.pid).exists(),
            "the old scheduler to be seen",
        )
        assert read_health().gone == []
        assert [each.job for each in job_health(RENAMED)] == [RENAMED]
    finally:
        host.stop()


CHANGELIST = "/admin/jobclaims/jobrun/"


def test_the_admin_lists_the_jobs_gone_from_the_code_until_one_is_retired(client):
    only_the_overdue_job()
    scheduled_by_an_earlier_deploy()
    operator = client_for(staff("view_jobrun", "change_jobrun"))

    page = operator.get(CHANGELIST).content.decode()
    assert "Gone from the code, so not watched" in page
    assert f'<a href="?job__exact={RENAMED}">{RENAMED}</a>' in page
    # The claim()-run job is overdue, not gone: the admin says nothing of it here.
    assert f'<a href="?job__exact={GONE}">' not in page

    # Retired from its claims, with the action: recorded, and no longer listed.
    act(operator, "retire_jobs", *JobRun.objects.filter(job=RENAMED))
    assert RetiredJob.objects.get().job == RENAMED
    assert LogEntry.objects.get().object_repr == RENAMED
    assert "Gone from the code" not in operator.get(CHANGELIST).content.decode()
    assert read_health().gone == []


#: A command of the deploy before a rename, started by cron: it has no
#: schedule, so no scheduler ever recorded it.
CRON_RENAMED = "send_reminders"
CRON_OLD_CODE = {"RESCHEDULED_JOB_NAME": CRON_RENAMED}


def test_a_cron_started_command_removed_from_the_code_is_gone_and_said_so_by_all_three(client):
    """The old deploy migrates and cron runs its command; this code has no
    command of that name. A job run through claim() stays watched."""
    only_the_overdue_job()
    [migrated] = race("migrate", "--verbosity", "0", instances=1, env=CRON_OLD_CODE)
    assert migrated.returncode == 0, migrated.stderr
    assert KnownCommand.objects.filter(job=CRON_RENAMED).exists()
    [ran] = race("rescheduled", instances=1, env=CRON_OLD_CODE)
    assert ran.outcome == "ran", ran.stderr
    # Renamed three days ago: watched, its minutely windows since would be missed.
    JobRun.objects.filter(job=CRON_RENAMED).update(
        claimed_at=F("claimed_at") - 3 * DAY, finished_at=F("finished_at") - 3 * DAY
    )

    assert verdicts(client) == {GONE: {"overdue", "missed"}}
    [gone] = read_health().gone
    assert (gone.job, gone.schedule) == (CRON_RENAMED, "")
    assert value(scrape(client), "jobclaims_job_gone", job_name=CRON_RENAMED) == 1
    run_command("jobclaims_retire", GONE)
    out, _err, status = run_command("jobclaims_status", "--check")
    healthy = len(SCHEDULED) + 1
    assert (out, status) == (
        f"All {healthy} jobs healthy; {CRON_RENAMED} is gone from the code.\n",
        0,
    )
    out, _err, _status = run_command("jobclaims_status")
    assert (
        f"{CRON_RENAMED}: gone from the code: no JobCommand and no live scheduler runs it " in out
    )
    assert "last schedule" not in out
