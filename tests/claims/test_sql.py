"""The claim statements written out in SQL store what the model describes."""

from __future__ import annotations

import datetime
import re

import pytest
from django.db import NotSupportedError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobclaims.claims.backends import mysql, postgresql, sqlite
from jobclaims.models import JobPause, JobRun, JobSkip, JobTag
from tests.support.helpers import FUNCTIONS

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = datetime.timedelta(minutes=5)


@pytest.fixture
def without_insert_returning(monkeypatch: pytest.MonkeyPatch) -> None:
    """This database, as MySQL or an SQLite older than 3.35 would be."""
    monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)


def stored_fields(run: JobRun) -> dict[str, object]:
    """Every field of ``run``, including those the admin may not edit."""
    return {field.name: getattr(run, field.name) for field in JobRun._meta.concrete_fields}


def test_a_claim_returns_exactly_the_row_it_stored():
    run = JobRun.objects.claim("charge", "2026-11-29", lease=LEASE, schedule="daily")
    assert run is not None
    assert stored_fields(run) == stored_fields(JobRun.objects.get())
    assert (run.schedule, run.holds_job, run.attempt, run.error) == ("daily", True, 1, "")
    assert run.expires_at - run.claimed_at == LEASE
    assert run.claimed_at.utcoffset() == datetime.timedelta(0)


def test_a_claim_that_may_overlap_holds_no_job():
    run = JobRun.objects.claim("charge", "2026-11-29", lease=LEASE, allow_overlap=True)
    assert run is not None
    assert JobRun.objects.get().holds_job is None


def test_a_release_writes_only_the_outcome():
    run = JobRun.objects.claim("charge", "2026-11-29", lease=LEASE)
    assert run is not None
    before = stored_fields(JobRun.objects.get())
    assert run.release(JobRun.Status.FAILED, error="Traceback: boom")
    stored = JobRun.objects.get()
    after = stored_fields(stored)
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {"status", "error", "holds_job", "finished_at"}
    assert (stored.status, stored.error, stored.holds_job) == ("failed", "Traceback: boom", None)
    assert stored.finished_at is not None
    assert abs(stored.finished_at - timezone.now()) < datetime.timedelta(minutes=1)


def test_a_skip_is_recorded_with_the_database_clock():
    JobRun.objects.claim("charge", "2026-11-29", lease=LEASE)
    assert JobRun.objects.claim("charge", "2026-11-29", lease=LEASE) is None
    skip = JobSkip.objects.get()
    assert (skip.job, skip.window, skip.reason) == ("charge", "2026-11-29", "held")
    assert abs(skip.skipped_at - JobRun.objects.get().claimed_at) < datetime.timedelta(minutes=1)


@pytest.mark.usefixtures("without_insert_returning")
def test_where_an_insert_cannot_return_rows_the_claim_reads_its_stamps_back():
    with CaptureQueriesContext(connection) as queries:
        run = JobRun.objects.claim("charge", "2026-11-29", lease=LEASE)
    # The pause read, then the claim's own statements, then the pauses
    # read again once it committed (a claim without a slot).
    assert [query["sql"].split()[0] for query in queries] == [
        "SELECT",
        "SELECT",
        "INSERT",
        "SELECT",
        "SELECT",
    ]
    assert "jobclaims_jobpause" in queries[-1]["sql"]
    assert run is not None
    assert stored_fields(run) == stored_fields(JobRun.objects.get())
    assert run.release()


def test_a_claim_on_a_database_without_written_out_sql_is_refused_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(connection, "vendor", "oracle")
    with pytest.raises(NotSupportedError, match=r"JOBCLAIMS\['DATABASE'\]"):
        JobRun.objects.claim("charge", "2026-11-29", lease=LEASE)
    monkeypatch.undo()
    assert not JobRun.objects.exists()


@pytest.mark.parametrize("backend", [postgresql, mysql, sqlite], ids=lambda module: module.__name__)
def test_every_backends_statements_name_the_models_own_table_and_columns(backend):
    # The statements are written whole, so a renamed field or table would
    # leave them behind; the claim tests run only the database at hand.
    assert (JobRun._meta.db_table, JobSkip._meta.db_table) == (
        "jobclaims_jobrun",
        "jobclaims_jobskip",
    )
    columns = {
        "jobclaims_jobrun": {field.column for field in JobRun._meta.concrete_fields},
        "jobclaims_jobskip": {field.column for field in JobSkip._meta.concrete_fields},
    }
    written = [value for name, value in vars(backend).items() if name.isupper()]
    if backend is postgresql:  # Its claim's own statements are functions.
        written += FUNCTIONS.values()
    inserts = [
        statement
        for statement in written
        if isinstance(statement, str) and re.search(r"\bINSERT\b", statement)
    ]
    assert inserts
    for statement in inserts:
        into = re.search(r"INTO (\w+)\s*\(([^)]*)\)", statement)
        assert into is not None, statement
        table, named = into.groups()
        assert {name.strip(' `"\n') for name in named.split(",")} <= columns[table], statement
    pauses = [statement for statement in inserts if "jobclaims_jobpause" in statement]
    pause_columns = {field.column for field in JobPause._meta.concrete_fields}
    assert JobPause._meta.db_table == "jobclaims_jobpause"
    assert {"job", "resumed_at", "until"} <= pause_columns
    assert all("resumed_at IS NULL" in statement for statement in pauses)
    assert JobTag._meta.db_table == "jobclaims_jobtag"
    assert {"job", "tag"} <= {field.column for field in JobTag._meta.concrete_fields}
    assert all("jobclaims_jobtag WHERE job = " in statement for statement in pauses)
    assert {"running", "succeeded"} <= {status.value for status in JobRun.Status}
    assert {"held", "succeeded", "overlap"} <= {reason.value for reason in JobSkip.Reason}
