"""The claims admin, through Django's test client: who sees and does what."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.template.response import TemplateResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from jobclaims.admin.runs import JobRunAdmin
from jobclaims.claims.rule import State
from jobclaims.jobs.claiming import claim
from jobclaims.models import JobRun, JobRunQuerySet, JobSkip, SchedulerSeen
from jobclaims.time import clock
from jobclaims.time.clock import database_now
from jobclaims.time.windows import resolve
from tests.support.factories import claim_fields, claim_in_state

pytestmark = pytest.mark.django_db

HOUR = datetime.timedelta(hours=1)

CHANGELIST = reverse("admin:jobclaims_jobrun_changelist")


def staff(*codenames: str) -> User:
    user = User.objects.create_user(f"staff-{'-'.join(codenames)}", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def client_for(user: User, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def detail_url(run: JobRun) -> str:
    return reverse("admin:jobclaims_jobrun_change", args=[run.pk])


def act(client: Client, action: str, *runs: JobRun):
    return client.post(
        CHANGELIST,
        {"action": action, "_selected_action": [run.pk for run in runs], "index": 0},
    )


@pytest.fixture
def active() -> JobRun:
    return claim_in_state(State.ACTIVE, window="2026-11-29T10:00+00:00")


@pytest.fixture
def operator() -> Client:
    return client_for(staff("view_jobrun", "change_jobrun"))


def test_anonymous_users_are_sent_to_the_login_page(client, active):
    for url in (CHANGELIST, detail_url(active)):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


def test_staff_without_the_view_permission_are_refused(active):
    client = client_for(staff())
    assert client.get(CHANGELIST).status_code == 403
    assert client.get(detail_url(active)).status_code == 403


def test_view_only_staff_see_the_claims_but_no_actions(active):
    response = client_for(staff("view_jobrun")).get(CHANGELIST)
    assert response.status_code == 200
    # The key may break after its date, and only there.
    day, _, time = active.window.partition("T")
    assert f'{day}</span><wbr><span class="jobclaims-nobreak">T{time}' in response.text
    assert 'name="action"' not in response.text


def test_view_only_staff_cannot_run_an_action_by_posting_it(active):
    response = act(client_for(staff("view_jobrun")), "expire_claims", active)
    assert response.status_code == 200
    assert JobRun.objects.active().get() == active
    assert not LogEntry.objects.exists()


def test_an_action_posted_without_a_csrf_token_is_refused(active):
    client = client_for(staff("view_jobrun", "change_jobrun"), enforce_csrf_checks=True)
    response = act(client, "expire_claims", active)
    assert response.status_code == 403
    assert JobRun.objects.active().get() == active


def test_operators_see_the_actions(operator, active):
    response = operator.get(CHANGELIST)
    assert 'value="expire_claims"' in response.text
    assert 'value="reopen_windows"' in response.text
    assert 'value="delete_selected"' not in response.text


def test_expiring_an_active_claim_lets_the_next_run_take_it_over(operator, active):
    response = act(operator, "expire_claims", active)
    assert response.status_code == 302
    assert JobRun.objects.expired().get() == active
    taken = JobRun.objects.claim(active.job, active.window, lease=datetime.timedelta(minutes=5))
    assert taken is not None
    assert taken.attempt == 2


def test_each_expired_claim_is_recorded_in_the_history_with_who_did_it(operator, active):
    finished = claim_in_state(State.SUCCEEDED, window="2026-11-28")
    act(operator, "expire_claims", active, finished)
    entry = LogEntry.objects.get()
    assert (entry.object_id, entry.action_flag) == (str(active.pk), CHANGE)
    assert isinstance(entry.user, User)  # django-stubs leaves LogEntry.user untyped
    assert entry.user.username == "staff-view_jobrun-change_jobrun"
    assert "Expired the lease by hand" in entry.get_change_message()
    history = operator.get(reverse("admin:jobclaims_jobrun_history", args=[active.pk]))
    assert "Expired the lease by hand" in history.text


def test_expiring_claims_that_are_not_active_changes_nothing_and_says_so(operator):
    finished = claim_in_state(State.SUCCEEDED)
    response = act(operator, "expire_claims", finished)
    page = operator.get(response["Location"])
    assert "nothing was expired" in page.text
    assert JobRun.objects.get().expires_at == finished.expires_at
    assert not LogEntry.objects.exists()


def test_a_reopened_window_is_taken_over_by_the_next_ordinary_claim(operator):
    done = claim_in_state(State.SUCCEEDED)
    act(operator, "reopen_windows", done)
    taken = JobRun.objects.claim(done.job, done.window, lease=datetime.timedelta(minutes=5))
    assert taken is not None
    assert taken.attempt == 2
    assert LogEntry.objects.get().object_id == str(done.pk)


def test_reopening_leaves_running_and_failed_claims_as_they_were(operator, active):
    failed = claim_in_state(State.FAILED, window="2026-11-28", error="Traceback: boom")
    act(operator, "reopen_windows", active, failed)
    assert JobRun.objects.get(pk=failed.pk).error == "Traceback: boom"
    assert JobRun.objects.active().get() == active
    assert not LogEntry.objects.exists()


def test_the_list_shows_each_state_as_a_badge_with_its_word(operator):
    for number, state in enumerate(State):
        claim_in_state(state, window=f"2026-11-2{number}")
    response = operator.get(CHANGELIST)
    for state in State:
        assert f'jobclaims-state--{state.value}" title=' in response.text
        assert f"</span> {state.label}</span>" in response.text


def test_in_an_operators_zone_the_list_dates_claims_where_the_database_can_and_says_so_if_not(
    operator, active
):
    """A middleware may activate each operator's zone; on MariaDB/MySQL
    without time-zone tables the database cannot date claims there, and the
    list leaves its dates out, saying why, instead of failing (W002 judges
    TIME_ZONE alone). PostgreSQL and SQLite date them in any zone."""
    with timezone.override("Asia/Tokyo"):
        page = operator.get(reverse("admin:jobclaims_jobrun_changelist")).content.decode()
    assert active.window in page
    if clock.dates_in(connection, "Asia/Tokyo"):
        assert 'class="toplinks"' in page
    else:
        assert 'class="toplinks"' not in page
        assert "Claims are not grouped by date: the default database cannot" in page


def test_the_list_says_when_leases_end_and_how_long_runs_took(operator, active):
    claim_in_state(State.EXPIRED, window="2026-11-29T09:00+00:00")
    claim_in_state(State.SUCCEEDED, window="2026-11-28")
    text = operator.get(CHANGELIST).text
    assert "in 9 min" in text or "in 10 min" in text
    assert "min ago" in text
    assert "1 min 35 s" in text


def test_the_list_counts_the_instances_that_stepped_aside_for_each_run(operator, active):
    # Two instances stepped aside: one row counts both, and names the last.
    JobSkip.objects.create(
        job=active.job, window=active.window, owner="web-3:8:bb", reason="held", count=2
    )
    response = operator.get(CHANGELIST)
    assert '<td class="field-skipped">2</td>' in response.text
    detail = operator.get(detail_url(active)).text
    assert "Last skipped at" in detail


def test_the_summary_counts_active_and_expired_claims_across_all_filters(operator, active):
    claim_in_state(State.EXPIRED, window="2026-11-29T09:00+00:00")
    claim_in_state(State.EXPIRED, "other_job")
    response = operator.get(CHANGELIST, {"state": "succeeded"})
    assert "1 active</a>" in response.text
    assert "2 expired</a>" in response.text


@pytest.mark.parametrize("state", list(State))
def test_the_state_filter_shows_only_claims_in_that_state(operator, state):
    for number, each in enumerate(State):
        claim_in_state(each, window=f"2026-11-2{number}")
    shown = operator.get(CHANGELIST, {"state": state.value}).context["cl"].result_list
    assert [run.state for run in shown] == [state.value]


def test_the_job_filter_and_the_search_narrow_the_list(operator, active):
    other = claim_in_state(State.SUCCEEDED, "send_reminders", owner="worker-7:99:abcdef01")
    by_job = operator.get(CHANGELIST, {"job": "send_reminders"}).context["cl"]
    by_owner = operator.get(CHANGELIST, {"q": "worker-7"}).context["cl"]
    by_window = operator.get(CHANGELIST, {"q": "T10:00"}).context["cl"]
    assert list(by_job.result_list) == [other]
    assert list(by_owner.result_list) == [other]
    assert list(by_window.result_list) == [active]


def test_the_newest_claim_comes_first(operator):
    old = claim_in_state(State.SUCCEEDED, window="2026-11-27", age=datetime.timedelta(days=2))
    new = claim_in_state(State.SUCCEEDED, window="2026-11-28")
    assert list(operator.get(CHANGELIST).context["cl"].result_list) == [new, old]


def test_the_detail_page_is_read_only_and_shows_the_traceback(operator):
    failed = claim_in_state(
        State.FAILED,
        error='Traceback (most recent call last):\n  File "x"\nValueError: <no>',
    )
    response = operator.get(detail_url(failed))
    assert response.status_code == 200
    assert 'name="job"' not in response.text
    assert 'name="_save"' not in response.text
    assert (
        '<pre class="jobclaims-traceback">Traceback (most recent call last):\n'
        "  File &quot;x&quot;\nValueError: &lt;no&gt;</pre>"
    ) in response.text


def test_the_detail_page_refuses_a_posted_change(operator, active):
    response = operator.post(detail_url(active), {"job": "renamed", "window": "x"})
    assert response.status_code == 403
    assert JobRun.objects.get().job == active.job


def test_claims_cannot_be_added_or_deleted_by_hand(operator, active):
    superuser = client_for(User.objects.create_superuser("root"))
    assert superuser.get(reverse("admin:jobclaims_jobrun_add")).status_code == 403
    delete = reverse("admin:jobclaims_jobrun_delete", args=[active.pk])
    assert superuser.post(delete, {"post": "yes"}).status_code == 403
    assert reverse("admin:jobclaims_jobrun_add") not in superuser.get(CHANGELIST).text
    assert JobRun.objects.get() == active


def test_the_list_runs_as_many_queries_for_10000_claims_as_for_10(operator):
    def queries_for_the_first_page() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert operator.get(CHANGELIST).status_code == 200
        # The paginator's count is the only one: no second, unfiltered count.
        assert sum("COUNT(*)" in query["sql"] for query in queries) == 1
        return len(queries)

    add_claims(10)
    with_10 = queries_for_the_first_page()
    add_claims(9_990)
    with_10000 = queries_for_the_first_page()
    print(f"change list queries: {with_10} at 10 claims, {with_10000} at 10,000")
    assert with_10 == with_10000


def add_claims(count: int) -> None:
    """Add ``count`` claims of ten jobs in every state, one window a minute."""
    now = database_now()
    start = JobRun.objects.count()
    cycle = list(State)
    runs = [
        JobRun(
            **claim_fields(
                cycle[number % 4],
                f"job_{number % 10}",
                f"window-{number}",
                now,
                age=datetime.timedelta(minutes=number),
            )
        )
        for number in range(start, start + count)
    ]
    JobRun.objects.bulk_create(runs, batch_size=1000)


@pytest.mark.django_db(transaction=True)
def test_filtering_to_one_job_lists_its_windows_no_instance_claimed(operator):
    now, hourly = database_now(), resolve("hourly")
    for hours_ago in (2, 0):
        with claim(
            "sync", window="hourly", key=hourly.key_at(now - datetime.timedelta(hours=hours_ago))
        ):
            pass
    JobRun.objects.filter(window=hourly.key_at(now - datetime.timedelta(hours=2))).update(
        claimed_at=now - datetime.timedelta(hours=2)
    )
    missed = hourly.key_at(now - datetime.timedelta(hours=1))
    page = operator.get(CHANGELIST, {"job__exact": "sync"}).content.decode()
    assert f"1 window of sync was never claimed:\n      {missed}" in page
    assert "never claimed" not in operator.get(CHANGELIST).content.decode()


def test_filtering_to_a_job_whose_schedule_names_no_window_lists_its_claims_and_no_missed_ones(
    operator,
):
    run = claim_in_state(State.SUCCEEDED, "flicker", "2026-11-29T10:00:00+00:00")
    JobRun.objects.filter(pk=run.pk).update(schedule="0-second")
    response = operator.get(CHANGELIST, {"job__exact": "flicker"})
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == [run]
    assert "never claimed" not in response.text


@pytest.mark.parametrize("query", [{}, {"job__exact": "sync"}])
def test_staff_without_the_view_permission_are_refused_before_any_summary_is_worked_out(
    monkeypatch, active, query
):
    def summary_work(*args: object) -> None:
        raise AssertionError("the summary was worked out for a user who may not see it")

    monkeypatch.setattr("jobclaims.admin.runs.missed_windows", summary_work)
    monkeypatch.setattr(JobRunQuerySet, "running_counts", summary_work)
    assert client_for(staff()).get(CHANGELIST, query).status_code == 403


def test_extra_context_given_to_the_list_wins_over_the_summary(rf, active):
    request = rf.get(CHANGELIST)
    request.user = staff("view_jobrun")
    model_admin = JobRunAdmin(JobRun, admin.site)
    response = model_admin.changelist_view(request, {"claim_counts": {"active": 7}})
    assert isinstance(response, TemplateResponse)
    assert response.context_data is not None
    assert response.context_data["claim_counts"] == {"active": 7}


@pytest.mark.django_db(transaction=True)
def test_filtering_to_a_scheduled_job_shows_its_schedule_and_next_fires(operator):
    page = operator.get(CHANGELIST, {"job__exact": "tick"}).content.decode()
    assert "tick: */2 * * * * * (Every second second of every minute, UTC)" in page
    assert "last run: none yet" in page
    assert "Every second second" not in operator.get(CHANGELIST).content.decode()


def test_cancelling_a_running_run_records_the_admin_user_and_the_history(operator, active):
    finished = claim_in_state(State.SUCCEEDED, window="2026-11-28")
    response = act(operator, "cancel_runs", active, finished)
    assert response.status_code == 302
    assert "Cancelled 1 run" in operator.get(response["Location"]).text
    run = JobRun.objects.get(pk=active.pk)
    assert run.status == JobRun.Status.CANCELLED
    assert run.cancelled_by == "staff-view_jobrun-change_jobrun"
    assert run.cancelled_at is not None
    assert JobRun.objects.get(pk=finished.pk).status == JobRun.Status.SUCCEEDED
    entry = LogEntry.objects.get()
    assert entry.object_id == str(active.pk)
    assert "Cancelled the run by hand" in entry.get_change_message()


def test_view_only_staff_cannot_cancel_a_run_by_posting_the_action(active):
    response = act(client_for(staff("view_jobrun")), "cancel_runs", active)
    assert response.status_code == 200  # The list again, as for any action it may not run.
    assert JobRun.objects.get().status == JobRun.Status.RUNNING
    assert not LogEntry.objects.exists()


def test_the_schedulers_seen_are_listed_live_or_gone_with_the_jobs_each_runs():
    now = database_now()
    SchedulerSeen.objects.create(
        host="web-1",
        pid=41,
        schedules={"nightly_latest": "0 0 * * *"},
        fingerprint="live",
        started_at=now - HOUR,
        last_seen_at=now,
    )
    SchedulerSeen.objects.create(
        host="web-2",
        pid=42,
        schedules={},
        fingerprint="gone",
        started_at=now - 3 * HOUR,
        last_seen_at=now - 2 * HOUR,
    )
    reader = client_for(staff("view_schedulerseen"))
    page = reader.get(reverse("admin:jobclaims_schedulerseen_changelist")).content.decode()
    # The rows, after the filters (which Django 6.x puts first).
    rows = page[page.index('id="result_list"') :]
    live, gone = rows.index(">web-1<"), rows.index(">web-2<")
    assert 'alt="True"' in rows[live:gone]
    assert 'alt="False"' in rows[gone:]
    assert "nightly_latest (0 0 * * *)" in rows[live:gone]
    # Written by the schedulers alone: nothing to add or change by hand.
    assert "Add scheduler" not in page
    row = SchedulerSeen.objects.get(host="web-1")
    detail = reader.get(reverse("admin:jobclaims_schedulerseen_change", args=[row.pk]))
    assert 'name="host"' not in detail.content.decode()
