"""The admin's pauses: adding one pauses the job, an action resumes it, the log names who."""

from __future__ import annotations

import contextlib
import datetime
import re
import zoneinfo

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from jobclaims.models import JobPause, JobRun
from jobclaims.time.clock import database_now

pytestmark = pytest.mark.django_db

ADD = reverse("admin:jobclaims_jobpause_add")
CHANGELIST = reverse("admin:jobclaims_jobpause_changelist")
WINDOW = "2026-11-29T10:00+00:00"
LEASE = datetime.timedelta(minutes=1)


def staff(name: str, *codenames: str) -> Client:
    user = User.objects.create_user(name, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator() -> Client:
    return staff("carol", "view_jobpause", "add_jobpause")


def pause(client: Client, job: str = "charge_ledger", **fields: str):
    return client.post(ADD, {"job": job, "reason": "the bank is down", "until": "", **fields})


def test_pausing_in_the_admin_pauses_the_job_and_logs_the_admin_user(operator):
    response = pause(operator)
    assert response.status_code == 302, response.content.decode()
    stored = JobPause.objects.get()
    assert (stored.job, stored.paused_by, stored.reason) == (
        "charge_ledger",
        "carol",
        "the bank is down",
    )
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is None
    entry = LogEntry.objects.get()
    assert (entry.user_id, entry.action_flag, entry.object_id) == (
        User.objects.get(username="carol").pk,
        ADDITION,
        str(stored.pk),
    )


def test_an_unknown_job_is_refused_in_the_form_naming_the_known_ones(operator):
    response = pause(operator, job="charge_ledgr")
    assert response.status_code == 200
    assert "no job is named &#x27;charge_ledgr&#x27;; name one of: " in response.content.decode()
    assert not JobPause.objects.exists()


def test_an_until_already_past_is_refused_in_the_form(operator):
    past = database_now() - datetime.timedelta(hours=1)
    response = pause(operator, until_0=f"{past:%Y-%m-%d}", until_1=f"{past:%H:%M:%S}")
    assert response.status_code == 200
    assert "This time has passed already" in response.content.decode()
    assert not JobPause.objects.exists()


@pytest.mark.parametrize("active", [None, "Asia/Tokyo"])
def test_the_form_names_the_zone_it_reads_until_in_and_ends_the_pause_there(operator, active):
    """Django reads a form's times in the zone active for the request (an
    operator's, where a middleware activates it), not in TIME_ZONE as
    jobclaims_pause --until does: the field's help says which."""
    zone = active or "UTC"  # tests/settings.py's TIME_ZONE
    until = datetime.datetime(2036, 12, 9, 9, 0, tzinfo=zoneinfo.ZoneInfo(zone))
    with timezone.override(active) if active else contextlib.nullcontext():
        form = operator.get(ADD).content.decode()
        pause(operator, until_0=f"{until:%Y-%m-%d}", until_1=f"{until:%H:%M:%S}")
    assert f"The pause ends by itself at this time, read in {zone}; empty" in form
    assert JobPause.objects.get().until == until


def test_a_kept_pause_opens_read_only_saying_who_paused_and_why(operator):
    pause(operator)
    stored = JobPause.objects.get()
    page = operator.get(reverse("admin:jobclaims_jobpause_change", args=[stored.pk]))
    assert page.status_code == 200
    assert "the bank is down" in page.content.decode()
    assert 'name="reason"' not in page.content.decode()


def test_resuming_in_the_admin_lets_the_job_run_and_logs_the_admin_user(operator):
    pause(operator)
    stored = JobPause.objects.get()
    response = operator.post(
        CHANGELIST, {"action": "resume_jobs", "_selected_action": [stored.pk], "index": 0}
    )
    assert response.status_code == 302
    stored.refresh_from_db()
    assert (stored.resumed_by, stored.resumed_at is not None) == ("carol", True)
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is not None
    entry = LogEntry.objects.get(action_flag=CHANGE)
    assert (entry.user_id, entry.change_message) == (
        User.objects.get(username="carol").pk,
        "Resumed the job.",
    )


def test_a_view_only_user_can_neither_pause_nor_resume():
    viewer = staff("dave", "view_jobpause")
    assert pause(viewer).status_code == 403
    JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE)
    operator = staff("carol", "view_jobpause", "add_jobpause")
    pause(operator)
    stored = JobPause.objects.get()
    page = viewer.get(CHANGELIST).content.decode()
    assert "resume_jobs" not in page
    viewer.post(CHANGELIST, {"action": "resume_jobs", "_selected_action": [stored.pk], "index": 0})
    stored.refresh_from_db()
    assert stored.resumed_at is None


def test_the_list_says_which_pauses_are_in_force(operator):
    pause(operator)
    page = operator.get(CHANGELIST).content.decode()
    assert "charge_ledger" in page
    assert 'alt="True"' in page


def test_a_reason_longer_than_a_pause_keeps_is_refused_in_the_form_and_one_as_long_is_kept(
    operator,
):
    page = operator.get(ADD).content.decode()
    assert 'maxlength="1000"' in page
    response = pause(operator, reason="x" * 1001)
    assert response.status_code == 200
    assert (
        "The reason is 1001 characters long, longer than the 1000 a pause keeps; shorten it."
        in response.content.decode()
    )
    assert not JobPause.objects.exists()
    assert pause(operator, reason="x" * 1000).status_code == 302
    assert JobPause.objects.get().reason == "x" * 1000


def test_a_pause_of_all_jobs_is_added_as_star_listed_as_all_jobs_and_resumed_by_the_action(
    operator,
):
    assert "or * to pause all jobs" in operator.get(ADD).content.decode()
    assert pause(operator, job="*").status_code == 302
    stored = JobPause.objects.get()
    assert (stored.job, str(stored)) == ("*", "all jobs paused by carol")
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is None
    page = operator.get(CHANGELIST).content.decode()
    assert re.search(r'class="field-paused_job"><a [^>]*>all jobs</a>', page), page
    operator.post(
        CHANGELIST, {"action": "resume_jobs", "_selected_action": [stored.pk], "index": 0}
    )
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is not None
