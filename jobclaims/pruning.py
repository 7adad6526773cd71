"""Deleting old finished claims, and old skips, without reopening a window.

A row is what tells a late instance that its window already ran. An instance
of a job that computed its window and then stalled before claiming it would,
without the row, claim that window afresh and run it twice; only the job's
latest window can meet such a straggler, so each job keeps its newest finished
row, however old. Older windows run again only when claimed on purpose, with
``--window``. Running rows are never deleted: an active one is held, and an
expired one is the trace of a crash that the next instance takes over.

Skips decide nothing (the claim rows do), so old ones simply go.
"""

from __future__ import annotations

import datetime

from django.db.models import F, QuerySet, Window
from django.db.models.functions import RowNumber

from jobclaims.clock import database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun, JobSkip

#: Rows deleted per statement: enough to be quick, few enough that no
#: statement holds row locks long enough to stall a job's claim.
BATCH_SIZE = 2000


def prune(
    older_than: datetime.timedelta,
    *,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
) -> int:
    """Delete finished claims that ended ``older_than`` ago; return how many.

    The age is measured on the database's clock, like every lease. With
    ``dry_run`` nothing is deleted and the count is of what would be.
    """
    db = jobclaims_settings.claims_database(JobRun)
    old = (
        JobRun.objects.using(db)
        .finished()
        .filter(finished_at__lt=database_now(db) - older_than)
        .exclude(pk__in=_newest_finished(db))
    )
    return _delete(old, dry_run, batch_size)


def prune_skips(
    older_than: datetime.timedelta,
    *,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
) -> int:
    """Delete skips recorded ``older_than`` ago; return how many, as ``prune()``."""
    db = jobclaims_settings.claims_database(JobRun)
    old = JobSkip.objects.using(db).filter(skipped_at__lt=database_now(db) - older_than)
    return _delete(old, dry_run, batch_size)


def _newest_finished(db: str) -> list[int]:
    """The key of each job's newest finished row, in one sorting pass.

    A job's newest row stays newest while pruning runs, or gives way to a
    newer one; either way its window keeps a row that says it ran.
    """
    ranked = (
        JobRun.objects.using(db)
        .finished()
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("job")],
                order_by=[F("claimed_at").desc(), F("pk").desc()],
            )
        )
    )
    return list(ranked.filter(rank=1).values_list("pk", flat=True))


def _delete(old: QuerySet, dry_run: bool, batch_size: int) -> int:
    """Delete ``old`` a batch of keys at a time, or count it for a dry run."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if dry_run:
        return old.count()
    deleted, after = 0, 0
    while True:
        batch = list(
            old.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:batch_size]
        )
        if not batch:
            return deleted
        # A range of keys, not a list, so there is no parameter limit; and the
        # DELETE restates the conditions, so a row that changed since it was
        # read (a failed claim that an instance took over) stays.
        deleted += old.filter(pk__gt=after, pk__lte=batch[-1]).delete()[0]
        after = batch[-1]
