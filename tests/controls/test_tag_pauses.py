"""Pausing every job with a tag: one switch, honoured by every claim of a tagged job."""

from __future__ import annotations

import datetime
import time

import pytest
from django.urls import reverse

from jobclaims import add_schedule
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.controls import pauses
from jobclaims.exceptions import UnknownJob
from jobclaims.jobs.discovery import record_tags
from jobclaims.models import JobPause, JobRun, JobTag
from jobclaims.testing import start
from jobclaims.time.clock import database_now
from tests.scheduling.test_stored_schedules import fires_run, fleet, running_every_second
from tests.support.helpers import run_command

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = "2026-11-29T10:00+00:00"
LEASE = datetime.timedelta(minutes=1)
SECOND = datetime.timedelta(seconds=1)


def claims(job: str) -> JobRun | Refusal:
    return JobRun.objects.try_claim(job, WINDOW, lease=LEASE)


def test_a_tag_pause_refuses_every_tagged_job_and_its_schedules_and_no_other():
    pauses.pause("#billing", by="alice", reason="card processor down")
    for job in ("charge_ledger", "regions[eu]", "regions"):
        refusal = claims(job)
        assert isinstance(refusal, Refusal), job
        assert refusal.reason == Reason.PAUSED
        assert refusal.paused is not None
        assert (refusal.paused.job, refusal.paused.by) == ("#billing", "alice")
    assert isinstance(claims("tick"), JobRun)
    assert pauses.resume("#billing", by="bob") == 1
    assert isinstance(claims("charge_ledger"), JobRun)


def test_an_unknown_tag_is_refused_naming_the_tags_and_nothing_is_written():
    with pytest.raises(
        UnknownJob, match="no job is tagged 'biling'; the tags are: billing, regions"
    ):
        pauses.pause("#biling", by="alice")
    assert not JobPause.objects.exists()


def test_the_commands_pause_and_resume_a_tag_and_a_refused_run_names_the_fix():
    out, err, status = run_command("jobclaims_pause", "--tag", "billing", "--reason", "audit")
    assert (err, status) == ("", 0)
    assert out == (
        "Paused every job tagged billing until they are resumed: no run of them starts meanwhile.\n"
    )
    [run] = start("charge_ledger")
    ran = run.finish(timeout=60)
    assert ran.returncode == 0, ran
    assert "its tag billing was paused by " in ran.stdout + ran.stderr
    assert "resume it with manage.py jobclaims_resume --tag billing" in ran.stdout + ran.stderr
    assert not JobRun.objects.exists()
    out, err, status = run_command("jobclaims_resume", "--tag", "billing")
    assert status == 0, err
    assert out.startswith("Resumed every job tagged billing: their next runs start as usual")


def test_the_status_and_the_schedules_page_show_a_tag_pause_on_its_jobs(admin_client):
    pauses.pause("#billing", by="alice", reason="audit")
    out, _, _ = run_command("jobclaims_status", "--job", "charge_ledger")
    assert "Paused: #billing, by alice" in out
    add_schedule(by="alice", name="eu", command="regions", expression="0 3 * * *")
    page = admin_client.get(reverse("admin:jobclaims_scheduledjob_changelist")).content.decode()
    assert '<strong>paused</strong> <span class="jobclaims-quiet">(as #billing)</span>' in page


def test_a_tag_beside_a_job_or_all_is_refused():
    _, err, status = run_command("jobclaims_pause", "charge_ledger", "--tag", "billing")
    assert status == 1
    assert "--tag pauses every job tagged billing, so name no job and no --all beside it" in err
    _, err, status = run_command("jobclaims_pause", "#billing")
    assert status == 1
    assert "pass --tag billing to pause its jobs" in err
    assert not JobPause.objects.exists()


def test_a_deploy_that_takes_a_tag_away_forgets_it_for_its_job_only():
    JobTag.objects.create(job="charge_ledger", tag="#legacy")
    JobTag.objects.create(job="gone_from_the_code", tag="#legacy")
    record_tags()
    recorded = set(JobTag.objects.values_list("job", "tag"))
    assert ("charge_ledger", "#legacy") not in recorded
    assert ("charge_ledger", "#billing") in recorded
    # A job the code no longer has keeps its rows: its history is its own.
    assert ("gone_from_the_code", "#legacy") in recorded


def test_a_claim_named_like_a_tags_pause_is_refused():
    with pytest.raises(ValueError, match="starts with '#', which names the pause of a tag"):
        claims("#billing")


@pytest.mark.xdist_group("fleets")
def test_a_tag_pause_stops_the_fires_of_three_schedulers_until_it_is_lifted(tmp_path):
    with fleet(tmp_path):
        running_every_second(tmp_path)
        pauses.pause("#billing", by="alice")
        # Read once the pause returned: it committed by then. Read before,
        # it missed the wait of a loaded machine's pause for SQLite's lock,
        # and a fire claimed in that wait ran, as it may.
        paused = database_now()
        time.sleep(5)
        resumed = database_now()
        pauses.resume("#billing", by="alice")
        time.sleep(4)

    ran = fires_run(tmp_path)
    # Claims ask for the tag's pause in their own statement: none started
    # from the pause's commit until its resume (a fire claimed just before
    # it may start a moment later).
    assert [fire for fire in ran if paused + SECOND < fire < resumed] == []
    assert [fire for fire in ran if fire > resumed + 2 * SECOND], "fires run again once resumed"
