"""Every page of jobclaims' admin opens, for a row of each kind, as a superuser.

The pages' own tests open the pages they are about; this one opens all of
them, the pages of a single row too, so that a page no test was written
for (a kept pause's, once) answers a page or a refusal, never a 500. Each
is opened again in a zone a middleware would activate for an operator.
"""

from __future__ import annotations

import contextlib
import datetime

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from jobclaims.controls import pauses
from jobclaims.controls.schedule_edits import add_schedule
from jobclaims.models import JobRun, SchedulerSeen
from jobclaims.time.clock import database_now

pytestmark = pytest.mark.django_db

LEASE = datetime.timedelta(minutes=1)


@pytest.fixture
def rows() -> None:
    """A row of each model the admin shows: a claim, a pause, a scheduler seen, a schedule."""
    JobRun.objects.claim("charge_ledger", "2026-11-29T10:00+00:00", lease=LEASE)
    pauses.pause("charge_ledger", by="carol", reason="the bank is down")
    now = database_now()
    SchedulerSeen.objects.create(
        host="web-1", pid=41, schedules={}, fingerprint="f", started_at=now, last_seen_at=now
    )
    add_schedule(
        by="carol", name="eu", command="regions", arguments="--region eu", expression="0 3 * * *"
    )


def pages() -> list[str]:
    """Each jobclaims admin page: the list, the form to add, and for every
    row its own page, its history and its delete page."""
    urls = []
    for model in admin.site._registry:
        if model._meta.app_label != "jobclaims":
            continue
        name = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        # The schedules page is a list alone, of a model with no table.
        rows = model._default_manager.all()[:1] if model._meta.managed else []
        wanted: list[tuple[str, list[object]]] = [("changelist", []), ("add", [])]
        wanted += [(page, [row.pk]) for row in rows for page in ("change", "history", "delete")]
        for page, args in wanted:
            with contextlib.suppress(NoReverseMatch):
                urls.append(reverse(f"{name}_{page}", args=args))
    return urls


@pytest.mark.parametrize("zone", [None, "Asia/Tokyo"])
def test_every_page_answers_a_page_or_a_refusal_never_an_error(rows, zone):
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root"))
    urls = pages()
    with timezone.override(zone) if zone else contextlib.nullcontext():
        answers = {url: client.get(url).status_code for url in urls}
    assert len(urls) == 21, urls  # 5 lists, 4 forms to add, 3 pages of each of 4 rows
    assert {url: code for url, code in answers.items() if code >= 500} == {}
    assert set(answers.values()) <= {200, 302, 403}, answers
