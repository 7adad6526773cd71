"""prune(), the function jobclaims_prune and benchmarks call, and what it must keep."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from jobclaims.claims.rule import State
from jobclaims.controls.pruning import prune, prune_skips
from jobclaims.models import JobRun, JobSkip
from jobclaims.testing import race
from jobclaims.time.clock import database_now
from tests.support.factories import claim_in_state
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db

DAY = datetime.timedelta(days=1)
MONTH = 30 * DAY
#: A statement budget no DELETE can exceed, so batches are sized only by count.
HOUR = datetime.timedelta(hours=1)
#: One no DELETE can meet, so every batch after the first is cut to one row.
MICROSECOND = datetime.timedelta(microseconds=1)


@pytest.fixture
def nightly() -> list[JobRun]:
    """Seven finished nights of one job, the newest ending 73 days ago."""
    return [
        claim_in_state(State.SUCCEEDED, "nightly", f"2026-09-0{day}", age=(80 - day) * DAY)
        for day in range(1, 8)
    ]


def test_prune_deletes_in_batches_of_the_size_asked_until_none_is_left(nightly):
    with CaptureQueriesContext(connection) as queries:
        assert prune(MONTH, batch_size=2, statement_budget=HOUR) == 6
    assert len(_deletes(queries)) == 3
    assert list(JobRun.objects.values_list("window", flat=True)) == ["2026-09-07"]


def test_a_dry_run_counts_what_prune_would_delete(nightly):
    assert prune(MONTH, dry_run=True) == 6
    assert JobRun.objects.count() == 7


def test_a_backfill_claimed_after_the_latest_window_does_not_cost_that_window_its_row(nightly):
    backfill = nightly[0]
    JobRun.objects.filter(pk=backfill.pk).update(claimed_at=backfill.claimed_at + 10 * DAY)
    assert prune(MONTH) == 5
    assert set(JobRun.objects.values_list("window", flat=True)) == {"2026-09-01", "2026-09-07"}


def test_the_latest_window_is_kept_for_each_schedule_a_job_had():
    for days_ago, window, schedule in [
        (44, "2026-09-01T09:00+00:00", "hourly"),
        (43, "2026-09-01T10:00+00:00", "hourly"),
        (42, "2026-09-01", "daily"),
        (41, "2026-09-02", "daily"),
    ]:
        claim_in_state(State.SUCCEEDED, "report", window, age=days_ago * DAY, schedule=schedule)
    # A rerun of the first hour, claimed last.
    JobRun.objects.filter(window="2026-09-01T09:00+00:00").update(claimed_at=database_now())
    assert prune(MONTH) == 1
    assert set(JobRun.objects.values_list("window", flat=True)) == {
        "2026-09-01T09:00+00:00",
        "2026-09-01T10:00+00:00",
        "2026-09-02",
    }


@pytest.mark.django_db(transaction=True)
def test_after_a_backfill_and_a_prune_the_latest_window_is_still_skipped_as_done():
    newest, older = "2026-11-29T10:00", "2026-11-29T08:00"
    assert race("charge_ledger", "--window", newest, instances=1)[0].outcome == "ran"
    assert race("charge_ledger", "--window", older, instances=1)[0].outcome == "ran"
    # Both finished long ago, the backfill after the newest window.
    JobRun.objects.update(
        claimed_at=F("claimed_at") - 40 * DAY, finished_at=F("finished_at") - 40 * DAY
    )
    [pruned] = race("jobclaims_prune", "--older-than", "30d", instances=1)
    assert pruned.stdout == "Deleted 0 finished claims and 0 skips.\n", pruned

    [late] = race("charge_ledger", "--window", newest, instances=1)
    assert late.outcome == "skipped", late
    assert "already succeeded" in late.stdout
    assert Charge.objects.count() == 2


def test_a_delete_that_runs_past_its_budget_shrinks_the_next_batch(nightly):
    with CaptureQueriesContext(connection) as queries:
        assert prune(MONTH, batch_size=4, statement_budget=MICROSECOND) == 6
    # 4 rows, then 1 and 1: without the budget, 4 and 2.
    assert len(_deletes(queries)) == 3
    assert list(JobRun.objects.values_list("window", flat=True)) == ["2026-09-07"]


def test_batches_start_small_and_double_up_to_the_batch_size():
    _old_skips(700)
    with CaptureQueriesContext(connection) as queries:
        assert prune_skips(MONTH, batch_size=300, statement_budget=HOUR) == 700
    # 100, 200, 300 and the last 100 rows.
    assert len(_deletes(queries)) == 4
    assert not JobSkip.objects.exists()


def test_prune_refuses_a_batch_size_below_one():
    with pytest.raises(ValueError, match="batch_size must be at least 1, not 0"):
        prune(MONTH, batch_size=0)


def test_prune_refuses_a_statement_budget_of_zero():
    with pytest.raises(ValueError, match="statement_budget must be positive"):
        prune(MONTH, statement_budget=datetime.timedelta(0))


def test_old_skips_are_pruned_in_batches_and_recent_ones_kept():
    now = database_now()
    for days in (40, 35, 31, 29):
        JobSkip.objects.create(
            job="nightly",
            window=f"2026-09-{days}",
            owner="web-2:77:feedf00d",
            reason=JobSkip.Reason.HELD,
            skipped_at=now - days * DAY,
        )
    assert prune_skips(MONTH, dry_run=True) == 3
    assert prune_skips(MONTH, batch_size=2) == 3
    assert JobSkip.objects.get().skipped_at == now - 29 * DAY


def _old_skips(count: int) -> None:
    skipped_at = database_now() - 2 * MONTH
    JobSkip.objects.bulk_create(
        JobSkip(
            job="nightly",
            window=f"2026-09-{number}",
            owner="web-2:77:feedf00d",
            reason=JobSkip.Reason.HELD,
            skipped_at=skipped_at,
        )
        for number in range(count)
    )


def _deletes(queries: CaptureQueriesContext) -> list[dict[str, str]]:
    return [query for query in queries if query["sql"].startswith("DELETE")]
