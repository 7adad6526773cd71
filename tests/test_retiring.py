"""Retiring a job removed or renamed in the code: ``jobclaims_retire`` and
the admin action take it out of ``--check``, the health page and the
metrics, keep its claims, and record who retired it, when and why."""

from __future__ import annotations

import getpass

import pytest
from django.contrib.admin.models import ADDITION, LogEntry

from jobclaims.clock import database_now
from jobclaims.models import JobRun, RetiredJob
from tests.helpers import run_command
from tests.monitored import HEALTHY, OVERDUE, SECOND, make_monitored_jobs, save_run
from tests.test_admin import act, client_for, staff
from tests.test_health_schedules import verdicts

# The health page's check reads in a thread of its own: committed rows only.
pytestmark = pytest.mark.django_db(transaction=True)

#: The overdue job of tests/monitored.py, as if renamed in the code.
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
    assert "No job named 'send_digset' has a claim or a schedule; the known jobs are: " in err
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
