"""The admin's schedules page: what it shows, who may press which button, the log."""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import time

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import load_command_class
from django.db import connections
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from jobclaims.admin.schedules import ScheduledJobAdmin
from jobclaims.claims.rule import State
from jobclaims.jobs import discovery
from jobclaims.models import JobPause, JobRun, SchedulerSeen, ScheduleVersion
from jobclaims.running.children import child_environment
from jobclaims.scheduling.schedule_versions import fingerprint
from jobclaims.testing import StartingLine
from jobclaims.time.clock import database_now
from tests.support.admin_clicks import START_VARIABLE
from tests.support.factories import claim_fields, claim_in_state
from tests.testapp.models import Charge

PAGE = reverse("admin:jobclaims_scheduledjob_changelist")
VIEWER = ("view_jobrun", "view_jobpause")
OPERATOR = ("view_jobrun", "change_jobrun", "view_jobpause", "add_jobpause")
ACTIONS = ("pause", "resume", "run", "cancel")
SECONDS_10 = datetime.timedelta(seconds=10)
DAY = datetime.timedelta(days=1)


def staff(name: str, *codenames: str, csrf: bool = False) -> Client:
    user = User.objects.create_user(name, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def press(client: Client, action: str, job: str = "nightly_latest", **fields: str):
    return client.post(PAGE, {"action": action, "job": job, **fields}, follow=True)


def said(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def row_of(page: str, job: str) -> str:
    """The HTML of ``job``'s row on the page."""
    start = page.index(f'data-job="{job}"')
    return page[start : page.index("</tr>", start)]


def wait_until_finished(job: str, window: str | None = None, timeout: float = 30.0) -> JobRun:
    """``job``'s run (of ``window``) once its process has recorded how it ended."""
    runs = JobRun.objects.filter(job=job)
    runs = runs if window is None else runs.filter(window=window)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = runs.first()
        if run is not None and run.finished_at is not None:
            return run
        time.sleep(0.1)
    raise AssertionError(f"no run of {job} finished within {timeout} s")


@pytest.mark.django_db
def test_the_page_shows_each_schedule_in_words_with_its_zone_and_next_five_fires():
    page = staff("vera", *VIEWER).get(PAGE).content.decode()
    row = row_of(page, "nightly_latest")
    assert "<code>0 0 * * *</code>" in row
    assert "<div>At 00:00 every day</div>" in row
    assert "UTC" in row
    now = database_now()
    fires = [now.date() + datetime.timedelta(days=day) for day in range(1, 6)]
    for day in fires:
        assert f'<time datetime="{day:%Y-%m-%d}T00:00:00+00:00"' in row
        assert f"{day:%Y-%m-%d} 00:00</time>" in row
    assert row.count("<li>") == 5
    assert 'data-job="tick"' in page


@pytest.mark.django_db
@override_settings(JOBCLAIMS={"MISSED_LOOK_BACK": datetime.timedelta(days=5)})
@pytest.mark.usefixtures("clear_of_midnight")
def test_the_page_shows_the_last_run_durations_pause_missed_fires_and_live_schedulers():
    now = database_now()
    day = [f"{now.date() - datetime.timedelta(days=ago)}T00:00+00:00" for ago in range(5)]
    ScheduleVersion.objects.create(
        job="nightly_latest",
        fingerprint=fingerprint("0 0 * * *"),
        schedule="0 0 * * *",
        since=now - datetime.timedelta(days=4),
    )
    failed = claim_in_state(State.FAILED, "nightly_latest", day[3], age=datetime.timedelta(days=3))
    assert failed.finished_at is not None
    JobRun.objects.filter(pk=failed.pk).update(claimed_at=failed.finished_at - SECONDS_10)
    claim_in_state(State.SUCCEEDED, "nightly_latest", day[1], age=datetime.timedelta(days=1))
    JobPause.objects.create(job="nightly_latest", paused_by="alice", reason="the bank is down")
    SchedulerSeen.objects.create(
        host="web-7", pid=4242, schedules={"nightly_latest": "0 0 * * *"}, fingerprint="f"
    )
    row = row_of(staff("vera", *VIEWER).get(PAGE).content.decode(), "nightly_latest")
    assert "✓</span> succeeded" in row
    assert f'<div class="jobclaims-key">{day[1]}</div>' in row
    bars = re.findall(r'<rect class="jobclaims-bar jobclaims-bar--(\w+)"[^>]* height="(\d+)"', row)
    assert bars == [("failed", "3"), ("succeeded", "24")]
    assert "median 52 s, longest 1 min 35 s" in row
    assert "<strong>paused</strong>" in row
    assert "by alice" in row
    assert "the bank is down" in row
    assert "2 missed" in row
    assert f"latest {day[0]}" in row
    assert "web-7 (pid 4242)" in row


@pytest.mark.django_db
def test_between_a_crontabs_once_runs_the_page_names_the_last_scheduler_not_none_at_all():
    now = database_now()
    seen = {"host": "cron-3", "pid": 77, "schedules": {"nightly_latest": "0 0 * * *"}}
    once = SchedulerSeen.objects.create(**seen, fingerprint="f")
    SchedulerSeen.objects.filter(pk=once.pk).update(stopped_at=now, last_seen_at=now)
    page = staff("vera", *VIEWER).get(PAGE).content.decode()
    assert "No scheduler runs right now: the last, cron-3 (pid 77), stopped at " in page
    assert "No live scheduler" not in page

    # Past the grace, the jobs have no scheduler: the page says so.
    long_ago = now - datetime.timedelta(hours=1)
    SchedulerSeen.objects.filter(pk=once.pk).update(stopped_at=long_ago, last_seen_at=long_ago)
    page = staff("ursula", *VIEWER).get(PAGE).content.decode()
    assert "No live scheduler: scheduled jobs start only while one runs" in page


@pytest.mark.django_db
def test_a_view_only_user_sees_no_button_and_each_post_is_refused():
    viewer = staff("vera", *VIEWER)
    page = viewer.get(PAGE).content.decode()
    assert 'name="action"' not in page
    assert '<th scope="col">Actions</th>' not in page
    claim_in_state(State.ACTIVE, "nightly_latest", "2026-11-29T00:00+00:00")
    for action in ACTIONS:
        assert press(viewer, action).status_code == 403, action
    assert not JobPause.objects.exists()
    assert JobRun.objects.get().status == JobRun.Status.RUNNING
    assert not LogEntry.objects.exists()


@pytest.mark.django_db
def test_pausing_needs_the_pause_permission_and_running_the_claims_one():
    pauser = staff("paula", "view_jobrun", "add_jobpause")
    page = pauser.get(PAGE).content.decode()
    assert 'value="pause"' in page
    assert 'value="run"' not in page
    assert press(pauser, "run").status_code == 403
    runner = staff("rick", "view_jobrun", "change_jobrun")
    page = runner.get(PAGE).content.decode()
    assert 'value="run"' in page
    assert 'value="pause"' not in page
    assert press(runner, "pause").status_code == 403
    assert not JobPause.objects.exists()
    assert not JobRun.objects.exists()


@pytest.mark.django_db
def test_a_user_without_the_view_permission_does_not_see_the_page():
    assert staff("nobody").get(PAGE).status_code == 403


@pytest.mark.django_db
def test_a_post_without_the_csrf_token_is_refused():
    operator = staff("carol", *OPERATOR, csrf=True)
    assert press(operator, "pause").status_code == 403
    assert not JobPause.objects.exists()


@pytest.mark.django_db
def test_pausing_and_resuming_from_the_page_logs_the_admin_user():
    operator = staff("carol", *OPERATOR)
    response = press(operator, "pause", reason="the bank is down")
    assert said(response) == [
        "Paused nightly_latest: every way it starts is refused until it is resumed."
    ]
    pause = JobPause.objects.get()
    assert (pause.job, pause.paused_by, pause.reason) == (
        "nightly_latest",
        "carol",
        "the bank is down",
    )
    assert 'value="resume"' in row_of(response.content.decode(), "nightly_latest")
    response = press(operator, "resume")
    assert said(response) == ["Resumed nightly_latest: its next fire starts as usual."]
    pause.refresh_from_db()
    assert pause.resumed_by == "carol"
    carol = User.objects.get(username="carol").pk
    entries = LogEntry.objects.order_by("pk")
    assert [(e.user_id, e.action_flag, e.object_id, e.change_message) for e in entries] == [
        (carol, ADDITION, str(pause.pk), "Paused the job from the schedules page."),
        (carol, CHANGE, str(pause.pk), "Resumed the job from the schedules page."),
    ]


@pytest.mark.django_db
def test_cancelling_from_the_page_ends_the_running_run_and_logs_it():
    running = claim_in_state(State.ACTIVE, "nightly_latest", "2026-11-29T00:00+00:00")
    operator = staff("carol", *OPERATOR)
    assert "Cancel the running run" in operator.get(PAGE).content.decode()
    response = press(operator, "cancel")
    assert said(response) == ["Cancelled 1 run of nightly_latest: its process is told and stops."]
    running.refresh_from_db()
    assert (running.status, running.cancelled_by) == (JobRun.Status.CANCELLED, "carol")
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id) == (CHANGE, str(running.pk))
    assert press(operator, "cancel").context["messages"]
    assert LogEntry.objects.count() == 1


@pytest.mark.django_db
def test_an_unknown_job_or_action_is_refused():
    operator = staff("carol", *OPERATOR)
    assert press(operator, "pause", job="charge_ledgr").status_code == 404
    assert press(operator, "explode").status_code == 400
    assert not JobPause.objects.exists()


@pytest.mark.django_db
def test_the_admin_index_and_the_claims_list_link_to_the_page():
    viewer = staff("vera", *VIEWER)
    assert f'href="{PAGE}"' in viewer.get(reverse("admin:index")).content.decode()
    claims = viewer.get(reverse("admin:jobclaims_jobrun_changelist")).content.decode()
    assert f'href="{PAGE}"' in claims


@pytest.mark.django_db(transaction=True)
def test_run_now_claims_the_current_fire_runs_it_in_its_own_process_and_logs_it():
    operator = staff("carol", *OPERATOR)
    response = press(operator, "run")
    run = JobRun.objects.get()
    fire = f"{database_now().date()}T00:00+00:00"
    assert run.window == fire
    (message,) = said(response)
    assert message.startswith(f"Started nightly_latest {fire} (pid ")
    run = wait_until_finished("nightly_latest")
    assert run.status == JobRun.Status.SUCCEEDED
    assert [(c.window, c.pid != 0) for c in Charge.objects.all()] == [(fire, True)]
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id, entry.change_message) == (
        ADDITION,
        str(run.pk),
        "Ran the job now from the schedules page.",
    )
    again = press(operator, "run")
    (refused,) = said(again)
    assert refused.startswith(f"Did not run nightly_latest {fire}: it already succeeded at ")
    assert Charge.objects.count() == 1
    assert LogEntry.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_run_now_of_a_paused_job_is_refused_with_the_pause():
    operator = staff("carol", *OPERATOR)
    press(operator, "pause", reason="the bank is down")
    (message,) = said(press(operator, "run"))
    assert message.startswith("Did not run nightly_latest ")
    assert "paused" in message
    assert "the bank is down" in message
    assert not JobRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_run_now_from_two_admins_at_the_same_instant_runs_once():
    for name in ("carol", "dan"):
        staff(name, *OPERATOR)
    line = StartingLine()
    clicks = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.admin_clicks", name, "run", "nightly_latest"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=[line.read_fd],
            env={**os.environ, **child_environment(), START_VARIABLE: str(line.read_fd)},
        )
        for name in ("carol", "dan")
    ]
    try:
        for click in clicks:
            assert click.stdout is not None
            assert click.stdout.readline() == "ready\n"
    finally:
        line.release()
    # Each click's output ends when its job's process, which shares it, ends too; the
    # job may say it adopted its claim before the click prints its answer.
    answers = [
        next(json.loads(line) for line in out.splitlines() if line.startswith("{"))
        for out in (click.communicate(timeout=60)[0] for click in clicks)
    ]
    said = sorted(message for answer in answers for message in answer["messages"])
    fire = f"{database_now().date()}T00:00+00:00"
    assert [answer["status"] for answer in answers] == [200, 200]
    assert said[0].startswith(f"Did not run nightly_latest {fire}: ")
    assert said[1].startswith(f"Started nightly_latest {fire} (pid ")
    assert wait_until_finished("nightly_latest").status == JobRun.Status.SUCCEEDED
    assert [charge.window for charge in Charge.objects.all()] == [fire]
    assert JobRun.objects.count() == 1
    assert LogEntry.objects.filter(action_flag=ADDITION).count() == 1


@pytest.mark.django_db
@override_settings(TIME_ZONE="America/New_York")
def test_fires_are_shown_in_the_schedules_time_zone():
    row = row_of(staff("vera", *VIEWER).get(PAGE).content.decode(), "nightly_latest")
    assert "America/New_York" in row
    assert re.search(r'T00:00:00-0[45]:00" title="[^"]+">\d{4}-\d\d-\d\d 00:00</time>', row)


@pytest.mark.django_db
def test_the_page_is_the_only_address_of_its_proxy():
    run = claim_in_state(State.SUCCEEDED, "nightly_latest", "2026-11-29T00:00+00:00")
    operator = staff("carol", *OPERATOR)
    assert operator.get(f"{PAGE}{run.pk}/change/").status_code == 404


@pytest.mark.django_db
def test_each_schedule_of_a_job_has_its_row_in_its_own_time_zone():
    page = staff("vera", *VIEWER).get(PAGE).content.decode()
    us = row_of(page, "sync_regions[--region us]")
    assert "America/New_York" in us
    # Its fires come every three seconds: shown to the second.
    assert re.search(r'-05:00" title="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</time>', us)
    assert "UTC" in row_of(page, "sync_regions[--region eu]")


@pytest.mark.django_db(transaction=True)
def test_run_now_of_one_schedule_of_several_runs_that_schedule_with_its_arguments(monkeypatch):
    monkeypatch.setenv("SYNC_HOLD", "0")
    response = press(staff("carol", *OPERATOR), "run", job="sync_regions[--region us]")
    (message,) = said(response)
    assert message.startswith("Started sync_regions[--region us] "), message
    run = wait_until_finished("sync_regions[--region us]")
    assert run.status == JobRun.Status.SUCCEEDED
    assert run.window.endswith("-05:00")
    assert list(Charge.objects.values_list("job", "window")) == [("us", run.window)]
    assert not JobRun.objects.filter(job="sync_regions[--region eu]").exists()


def many_scheduled(monkeypatch, count: int) -> list[str]:
    """``count`` scheduled jobs as discovery reports them (nightly_latest's
    command under as many names), each with a history: a run that failed, one
    that succeeded, one running, and a pause for every third."""
    nightly = load_command_class("tests.testapp", "nightly_latest")
    names = [f"nightly_{number:03d}" for number in range(count)]
    monkeypatch.setattr(discovery, "scheduled_commands", lambda: dict.fromkeys(names, nightly))
    now = database_now()
    JobRun.objects.bulk_create(
        JobRun(**claim_fields(state, name, f"{(now - ago).date()}T00:00+00:00", now, ago))
        for name in names
        for ago, state in ((3 * DAY, State.FAILED), (2 * DAY, State.SUCCEEDED), (DAY, State.ACTIVE))
    )
    JobPause.objects.bulk_create(
        JobPause(job=name, paused_by="alice", reason="down") for name in names[::3]
    )
    return names


@pytest.mark.django_db
def test_the_page_reads_the_same_few_queries_for_10_jobs_as_for_200_a_page_at_a_time(
    monkeypatch,
):
    client = staff("vera", *OPERATOR)
    counted = {}
    for count in (10, 200):
        JobRun.objects.all().delete()
        JobPause.objects.all().delete()
        names = many_scheduled(monkeypatch, count)
        with CaptureQueriesContext(connections["default"]) as queries:
            page = client.get(PAGE).content.decode()
        counted[count] = len(queries)
        shown = re.findall(r'<tr class="jobclaims-schedule" data-job="(\w+)"', page)
        assert shown == names[: len(shown)]
        assert "<strong>paused</strong>" in row_of(page, names[0])
        assert "Cancel the running run" in row_of(page, names[1])
    assert counted[10] == counted[200], counted
    assert counted[200] <= 25, counted
    assert len(shown) == ScheduledJobAdmin.list_per_page < 200
    last = client.get(PAGE, {"p": 4}).content.decode()
    assert re.findall(r'data-job="(\w+)"', last)[-1] == "nightly_199"


@pytest.mark.django_db
def test_a_reason_longer_than_a_pause_keeps_is_refused_on_the_page_not_cut():
    operator = staff("carol", *OPERATOR)
    assert 'maxlength="1000"' in row_of(operator.get(PAGE).content.decode(), "nightly_latest")
    (message,) = said(press(operator, "pause", reason="x" * 1001))
    assert message == (
        "Did not pause nightly_latest: the reason is 1001 characters long, longer than the "
        "1000 a pause keeps; shorten it."
    )
    assert not JobPause.objects.exists()


@pytest.mark.django_db
def test_the_page_says_all_jobs_are_paused_by_whom_why_and_how_to_resume_them():
    page = staff("vera", *VIEWER).get(PAGE).content.decode()
    assert "All jobs are paused" not in page
    JobPause.objects.create(job="*", paused_by="alice", reason="the upgrade")
    page = staff("carol", *OPERATOR).get(PAGE).content.decode()
    assert "<strong>All jobs are paused</strong>" in page
    assert "by alice " in page
    assert "the upgrade" in page
    assert "manage.py jobclaims_resume --all" in page


@pytest.mark.django_db
def test_resuming_a_job_on_the_page_while_all_jobs_are_paused_says_they_still_hold_it():
    operator = staff("carol", *OPERATOR)
    press(operator, "pause")
    JobPause.objects.create(job="*", paused_by="alice")
    (message,) = said(press(operator, "resume"))
    assert message == (
        "Resumed nightly_latest, but all jobs are still paused: no fire of it starts "
        "until they are resumed."
    )
    (message,) = said(press(operator, "run"))
    assert message.startswith("Did not run nightly_latest ")
    assert "all jobs paused by alice" in message
    assert not JobRun.objects.exists()
