"""prune(), the function jobclaims_prune and benchmarks call."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobclaims.clock import database_now
from jobclaims.models import JobRun, JobSkip
from jobclaims.pruning import prune, prune_skips
from jobclaims.states import State
from tests.factories import claim_in_state

pytestmark = pytest.mark.django_db

DAY = datetime.timedelta(days=1)
MONTH = 30 * DAY


@pytest.fixture
def nightly() -> list[JobRun]:
    """Seven finished nights of one job, the newest ending 73 days ago."""
    return [
        claim_in_state(State.SUCCEEDED, "nightly", f"2026-09-0{day}", age=(80 - day) * DAY)
        for day in range(1, 8)
    ]


def test_prune_deletes_in_batches_of_the_size_asked_until_none_is_left(nightly):
    with CaptureQueriesContext(connection) as queries:
        assert prune(MONTH, batch_size=2) == 6
    deletes = [query for query in queries if query["sql"].startswith("DELETE")]
    assert len(deletes) == 3
    assert list(JobRun.objects.values_list("window", flat=True)) == ["2026-09-07"]


def test_a_dry_run_counts_what_prune_would_delete(nightly):
    assert prune(MONTH, dry_run=True) == 6
    assert JobRun.objects.count() == 7


def test_the_newest_finished_claim_of_a_job_is_the_last_one_claimed(nightly):
    rerun = nightly[0]
    JobRun.objects.filter(pk=rerun.pk).update(claimed_at=rerun.claimed_at + 10 * DAY)
    prune(MONTH)
    assert list(JobRun.objects.all()) == [rerun]


def test_prune_refuses_a_batch_size_below_one():
    with pytest.raises(ValueError, match="batch_size must be at least 1, not 0"):
        prune(MONTH, batch_size=0)


def test_old_skips_are_pruned_in_batches_and_recent_ones_kept():
    now = database_now()
    for days in (40, 35, 31, 29):
        JobSkip.objects.create(
            job="nightly",
            window="2026-09-01",
            owner="web-2:77:feedf00d",
            reason=JobSkip.Reason.HELD,
            skipped_at=now - days * DAY,
        )
    assert prune_skips(MONTH, dry_run=True) == 3
    assert prune_skips(MONTH, batch_size=2) == 3
    assert JobSkip.objects.get().skipped_at == now - 29 * DAY
