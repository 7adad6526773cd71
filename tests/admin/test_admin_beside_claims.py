"""Operators' changes in the admin, made while other processes claim all the time.

SQLite begins a transaction deferred, and one that has read cannot start
writing once another connection has committed since: it fails at once with
"database is locked", without waiting out the busy timeout. The admin reads
before it writes (the form's checks, the rows an action logs), and the
schedulers' claims commit every few seconds: each change below fails that
way now and then unless it takes the write lock before it reads.

The tests' own reads wait too (``observed()``): in SQLite's default journal
a read cannot begin while a commit writes the file, and a process that
commits without pause kept one out past the busy timeout on a loaded CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import partial
from typing import TypeVar

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

from jobclaims.claims import retries
from jobclaims.models import JobPause, JobRun, StoredSchedule
from jobclaims.running.children import child_environment

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")

#: How many times each change is made. Without the write lock taken first,
#: SQLite refused a change in every run tried: the stored schedule's add, the
#: pause's add, the schedules page's resume and the claims' actions each.
ROUNDS = 15


@pytest.fixture
def claiming() -> Iterator[None]:
    """A process that claims and releases windows of "busy", one after another."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.busy_claimer", "busy"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **child_environment()},
    )
    assert process.stdout.readline().strip() == "ready", process.communicate()  # type: ignore[union-attr]
    yield
    out, err = process.communicate(input="", timeout=60)
    assert process.returncode == 0, err
    # Claimed again after its first, beside the changes: not stuck. How often
    # depends on the machine's load (12 to 141 over one test's changes).
    assert int(out) > 1, "the claims did not go on beside the changes"


@pytest.fixture
def operator() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("carol"))
    return client


def observed(read: Callable[[], T]) -> T:
    """What ``read`` finds, tried again while the claimer's commits keep it out."""
    return retries.retrying(connection, read)


def made(response) -> None:
    """The change was made: the admin went on to the next page, saying no error."""
    assert response.status_code == 302, response.content.decode()[:2000]


def test_stored_schedules_added_changed_and_deleted_beside_claims_are_each_made(claiming, operator):
    form = {"command": "regions", "arguments": "--region eu", "overlap": "allow"}
    for number in range(ROUNDS):
        name = f"eu{number}"
        made(
            operator.post(
                reverse("admin:jobclaims_storedschedule_add"),
                {**form, "name": name, "expression": "0 3 * * *"},
            )
        )
        stored = observed(partial(StoredSchedule.objects.get, name=name))
        change = reverse("admin:jobclaims_storedschedule_change", args=[stored.pk])
        made(
            operator.post(
                change, {**form, "name": name, "expression": "0 4 * * *", "read_version": 1}
            )
        )
        assert observed(partial(StoredSchedule.objects.get, name=name)).expression == "0 4 * * *"
        delete = reverse("admin:jobclaims_storedschedule_delete", args=[stored.pk])
        made(operator.post(delete, {"post": "yes"}))
    assert not observed(StoredSchedule.objects.exists)


def test_pauses_resumes_and_claim_actions_beside_claims_each_take_effect(claiming, operator):
    page = reverse("admin:jobclaims_scheduledjob_changelist")
    for number in range(ROUNDS):
        reason = f"pause {number}"
        made(
            operator.post(
                reverse("admin:jobclaims_jobpause_add"),
                {"job": "nightly_latest", "reason": reason, "until": ""},
            )
        )
        pause = observed(partial(JobPause.objects.in_force().get, job="nightly_latest"))
        assert pause.reason == reason
        made(operator.post(page, {"action": "resume", "job": "nightly_latest"}))
        assert not observed(JobPause.objects.in_force().filter(job="nightly_latest").exists)
    for action in ("expire_claims", "reopen_windows") * (ROUNDS // 2):
        runs = observed(lambda: list(JobRun.objects.filter(job="busy").order_by("-pk")[:3]))
        made(
            operator.post(
                reverse("admin:jobclaims_jobrun_changelist"),
                {"action": action, "_selected_action": [run.pk for run in runs], "index": 0},
            )
        )


@pytest.mark.skipif(
    connection.vendor != "sqlite", reason="Row locks: a change waits for the rows it writes alone"
)
def test_a_change_that_waits_out_the_busy_timeout_tries_again_and_is_made(
    operator, sqlite_locked_past_the_busy_timeout
):
    made(
        operator.post(
            reverse("admin:jobclaims_jobpause_add"),
            {"job": "nightly_latest", "reason": "deploy", "until": ""},
        )
    )
    assert JobPause.objects.in_force().get(job="nightly_latest").reason == "deploy"
