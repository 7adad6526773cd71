"""Claims go to the primary even when a router sends reads to a replica.

A replica lags its primary: two instances that each read a free window from
it would both run. Here "replica" is the test database under another alias
(TEST MIRROR), so only the queries each connection ran show where a claim
went.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from jobclaims.models import JobRun
from tests.support.helpers import run_command, written_out

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "replica"])

WINDOW = "2026-11-29T10:00+00:00"
LEASE = datetime.timedelta(minutes=5)


@pytest.fixture(autouse=True)
def reads_go_to_the_replica(settings):
    settings.DATABASE_ROUTERS = ["tests.support.routers.ReadReplicaRouter"]


@dataclass
class ClaimQueries:
    """The SQL that touched the claims table, per database alias."""

    primary: list[str]
    replica: list[str]


@contextmanager
def claim_queries() -> Iterator[ClaimQueries]:
    seen = ClaimQueries(primary=[], replica=[])
    with (
        CaptureQueriesContext(connections["default"]) as primary,
        CaptureQueriesContext(connections["replica"]) as replica,
    ):
        yield seen
    for captured, into in ((primary, seen.primary), (replica, seen.replica)):
        into.extend(
            query["sql"]
            for query in captured.captured_queries
            if JobRun._meta.db_table in written_out(query["sql"])
        )


def test_the_router_really_sends_reads_to_the_replica():
    with claim_queries() as queries:
        list(JobRun._base_manager.all())
    assert (len(queries.primary), len(queries.replica)) == (0, 1)


def test_the_default_manager_reads_the_claims_database_whatever_the_router_says():
    with claim_queries() as queries:
        list(JobRun.objects.all())
        JobRun.objects.listing().count()
        JobRun.objects.running_counts()
    assert queries.replica == []
    assert len(queries.primary) == 3


def test_status_lists_missed_windows_of_every_job_the_primary_has_seen():
    run_command("charge_ledger", "--window", WINDOW)
    with claim_queries() as queries:
        _out, err, status = run_command("jobclaims_status", "--missed")
    assert status == 0, err
    assert queries.replica == []
    assert any("DISTINCT" in sql for sql in queries.primary)


def test_a_claim_and_its_release_use_the_primary_only():
    with claim_queries() as queries:
        run = JobRun.objects.claim("sync", WINDOW, lease=LEASE)
        assert run is not None
        assert run.release()
    assert queries.replica == []
    assert any("INSERT" in written_out(sql) for sql in queries.primary)
    assert any(sql.startswith("UPDATE") for sql in queries.primary)


def test_a_refused_claim_reads_the_primary_only():
    JobRun.objects.claim("sync", WINDOW, lease=LEASE)
    with claim_queries() as queries:
        assert JobRun.objects.claim("sync", WINDOW, lease=LEASE) is None
    assert queries.replica == []
    assert queries.primary


def test_a_takeover_of_a_failed_window_uses_the_primary_only():
    failed = JobRun.objects.claim("sync", WINDOW, lease=LEASE)
    assert failed is not None
    failed.release(JobRun.Status.FAILED, error="boom")
    with claim_queries() as queries:
        run = JobRun.objects.claim("sync", WINDOW, lease=LEASE)
    assert run is not None
    assert run.attempt == 2
    assert queries.replica == []


def test_a_job_command_claims_and_records_its_outcome_on_the_primary():
    with claim_queries() as queries:
        out, err, status = run_command("charge_ledger", "--window", WINDOW)
    assert status == 0, err
    assert out.startswith("Claimed ")
    assert queries.replica == []
    assert JobRun.objects.using("default").get().status == JobRun.Status.SUCCEEDED


def test_a_skipped_job_command_explains_the_skip_from_the_primary():
    run_command("charge_ledger", "--window", WINDOW)
    with claim_queries() as queries:
        out, err, status = run_command("charge_ledger", "--window", WINDOW)
    assert status == 0, err
    assert out.startswith(f"Skipped charge_ledger {WINDOW}: it already succeeded")
    assert queries.replica == []
