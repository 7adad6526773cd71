"""Deleting old finished claims, and old skips, without reopening a window.

A row is what tells a late instance that its window already ran. The job's
latest window is the one its next scheduled instance can still compute (a
monthly job's month lasts longer than most ``--older-than`` ages), and an
instance that computed its window and then stalled would, without the row,
claim it afresh and run it twice. So each job keeps, however old, the row of
its latest window, and that is not always the row claimed last: a backfill
(``--window``), ``--force`` or a retry claims an older window after it.
Older windows run again only when claimed on purpose, with ``--window``.
Running rows are never deleted: an active one is held, and an expired one is
the trace of a crash that the next instance takes over.

Skips decide nothing (the claim rows do), so old ones simply go.

``prune_history()`` brings the history within the bounds the settings give
(``HISTORY_MAX_AGE``, ``HISTORY_MAX_ROWS_PER_JOB``), as the schedulers do by
themselves (``jobclaims.scheduling.retention``) and ``jobclaims_prune``
without ``--older-than`` does: by age, and each job's rows beyond its newest
so many, runs and skips alike, never a guarding row, and by count never a
row of the look-back health reads missed runs from.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from django.db import connections
from django.db.models import Count, Max, Q, QuerySet

from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun, JobSkip
from jobclaims.time.clock import database_now

#: How long each DELETE statement aims to run. Its rows stay locked from its
#: start to the COMMIT after it, so a claim or release of one of them may
#: wait that long. The longest DELETE of a prune runs several times the aim
#: (it waits on page reads and on flushing), which the aim leaves room for;
#: the measured figures are in docs/performance.md, Prune.
STATEMENT_BUDGET = datetime.timedelta(milliseconds=20)

#: The most rows one DELETE removes, however quick the ones before it were:
#: a batch grown in a quiet spell holds its locks all the longer when the
#: disk or the CPUs turn busy in the middle of it.
BATCH_SIZE = 2000

#: Rows in the first DELETE, which has no timing yet to size it by.
FIRST_BATCH = 100


def prune(
    older_than: datetime.timedelta,
    *,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    statement_budget: datetime.timedelta = STATEMENT_BUDGET,
) -> int:
    """Delete finished claims that ended ``older_than`` ago; return how many.

    The age is measured on the database's clock, like every lease. With
    ``dry_run`` nothing is deleted and the count is of what would be.
    Each DELETE is sized by how long the one before it took, to run about
    ``statement_budget``; it removes at most ``batch_size`` rows, and the
    first removes at most ``FIRST_BATCH`` (see ``_next_size``).
    """
    db = jobclaims_settings.claims_database(JobRun)
    old = (
        JobRun.objects.finished()
        .filter(finished_at__lt=database_now(db) - older_than)
        .exclude(pk__in=_guards(db))
    )
    return _delete(old, dry_run, batch_size, statement_budget)


def prune_skips(
    older_than: datetime.timedelta,
    *,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    statement_budget: datetime.timedelta = STATEMENT_BUDGET,
) -> int:
    """Delete skips recorded ``older_than`` ago; return how many, as ``prune()``."""
    db = jobclaims_settings.claims_database(JobRun)
    old = JobSkip.objects.filter(skipped_at__lt=database_now(db) - older_than)
    return _delete(old, dry_run, batch_size, statement_budget)


@dataclass
class Pruned:
    """What a prune of the history deleted, and what its DELETEs took."""

    runs: int = 0
    skips: int = 0
    #: DELETE statements sent, and the longest one's seconds.
    statements: int = 0
    longest: float = 0.0
    #: Whether it stopped before it was done, when asked to (``stop``).
    stopped: bool = False

    def said(self) -> str:
        """One line for a log, or a run's output."""
        done = "Stopped after deleting" if self.stopped else "Deleted"
        return (
            f"{done} {_counted(self.runs, 'finished run')} and {_counted(self.skips, 'skip')} "
            f"in {_counted(self.statements, 'DELETE')} (the longest {1000 * self.longest:.0f} ms)."
        )


def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def prune_history(
    max_age: datetime.timedelta | None,
    rows_per_job: int | None,
    *,
    keep_younger_than: datetime.timedelta,
    stop: Callable[[], bool] = lambda: False,
    batch_size: int = BATCH_SIZE,
    statement_budget: datetime.timedelta = STATEMENT_BUDGET,
) -> Pruned:
    """Delete finished runs and skips beyond the history's bounds.

    Older than ``max_age`` (None: any age is kept); and, past each job's
    newest ``rows_per_job`` finished runs (and as many skips), the older
    ones, but none younger than ``keep_younger_than``: health finds a
    job's missed runs by the rows of its look-back (``MISSED_LOOK_BACK``).
    Running rows and the rows guarding each job's latest window stay, as
    ``prune()`` keeps them. ``stop`` is asked before each DELETE: once it
    says so, the prune ends there, ``stopped``.
    """
    db = jobclaims_settings.claims_database(JobRun)
    now = database_now(db)
    pruned = Pruned()
    finished = JobRun.objects.finished().exclude(pk__in=_guards(db))
    skips = JobSkip.objects.all()
    batches: list[tuple[QuerySet, str]] = []
    if max_age is not None:
        batches += [
            (finished.filter(finished_at__lt=now - max_age), "runs"),
            (skips.filter(skipped_at__lt=now - max_age), "skips"),
        ]
    # The bound by count is read after the bound by age has deleted its share.
    beyond = _beyond(finished, skips, rows_per_job, now - keep_younger_than)
    for old, kind in itertools.chain(batches, beyond):
        deleted = _delete(old, False, batch_size, statement_budget, pruned, stop)
        setattr(pruned, kind, getattr(pruned, kind) + deleted)
        if pruned.stopped:
            break
    return pruned


def _beyond(
    finished: QuerySet, skips: QuerySet, rows: int | None, kept_from: datetime.datetime
) -> Iterator[tuple[QuerySet, str]]:
    """Per job with more than ``rows`` finished runs (or skips), those past
    its newest ``rows``, claimed (or last skipped) before ``kept_from``.

    One count per table finds the jobs over the bound; then, per such job,
    the time of its ``rows``-th newest row cuts. Rows of that very time
    stay, so a job keeps at least ``rows``.
    """
    if rows is None:
        return
    for table, moment, kind in ((finished, "claimed_at", "runs"), (skips, "skipped_at", "skips")):
        over = (
            table.order_by()
            .values("job")
            .annotate(rows=Count("pk"))
            .filter(rows__gt=rows)
            .values_list("job", flat=True)
        )
        for job in list(over):
            of_job = table.filter(job=job)
            newest = of_job.order_by(f"-{moment}").values_list(moment, flat=True)
            cut = newest[rows - 1 : rows].first()
            if cut is not None:  # Unless its rows were deleted meanwhile.
                yield of_job.filter(**{f"{moment}__lt": min(cut, kept_from)}), kind


def _guards(db: str) -> list[int]:
    """The keys of the rows that guard each job's latest window.

    Within one schedule, keys sort as their windows follow each other: dates,
    ISO weeks and months by their digits, and shorter windows by their local
    start, written to the minute or second with the same offset while the
    offset holds. So the greatest key of each ``(job, schedule)`` is the
    latest window. Jobs whose schedule changed have keys of several shapes
    (``2026-11-29`` sorts before ``2026-11-29T10:00+00:00``), which are only
    compared within their own schedule, so each schedule's latest row stays.

    The row claimed last is kept too, whatever its key: it is usually the
    same row, and it guards where the keys' order is not time's, as in the
    hour a daylight-saving change repeats east of UTC, after ``TIME_ZONE``
    changed, or for keys ``claim()`` was given without a schedule.

    One pass over the finished rows finds both per group, with no sort;
    then each row is looked up on an index, by ``(job, window)`` and by
    ``claimed_at``, a few groups at a time. A kept row stays kept while
    pruning runs, or gives way to a newer one; either way its window keeps a
    row that says it ran.
    """
    finished = JobRun.objects.finished()
    groups = list(
        finished.values("job", "schedule")
        .annotate(latest_window=Max("window"), last_claimed_at=Max("claimed_at"))
        .order_by()
    )
    keys: set[int] = set()
    for start in range(0, len(groups), _GROUPS_PER_LOOKUP):
        some = groups[start : start + _GROUPS_PER_LOOKUP]
        latest = Q()
        for group in some:
            latest |= Q(job=group["job"], window=group["latest_window"])
        keys.update(finished.filter(latest).values_list("pk", flat=True))
        last = {(group["job"], group["schedule"], group["last_claimed_at"]) for group in some}
        candidates = finished.filter(claimed_at__in={claimed_at for _, _, claimed_at in last})
        keys.update(
            pk
            for pk, *group in candidates.values_list("pk", "job", "schedule", "claimed_at")
            if tuple(group) in last
        )
    return sorted(keys)


#: Groups whose rows one pair of lookups finds: three parameters each, well
#: under every backend's limit on a statement's parameters.
_GROUPS_PER_LOOKUP = 100


def _delete(
    old: QuerySet,
    dry_run: bool,
    batch_size: int,
    budget: datetime.timedelta,
    tally: Pruned | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Delete ``old`` a batch of keys at a time, or count it for a dry run;
    ``tally`` counts the DELETEs, and ``stop`` ends it between two."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if budget <= datetime.timedelta():
        raise ValueError(f"statement_budget must be positive, not {budget!r}")
    if dry_run:
        return old.count()
    tally = tally or Pruned()
    deleted, after, size = 0, 0, min(FIRST_BATCH, batch_size)
    while (last := _batch_end(old, after, size)) is not None:
        if stop():
            tally.stopped = True
            break
        # A range of keys, not a list, so there is no parameter limit; and the
        # DELETE restates the conditions, so a row that changed since it was
        # read (a failed claim that an instance took over) stays.
        rows, took = _timed_delete(old.filter(pk__gt=after, pk__lte=last))
        deleted += rows
        tally.statements += 1
        tally.longest = max(tally.longest, took)
        size, after = _next_size(size, took, budget.total_seconds(), batch_size), last
    return deleted


def _timed_delete(batch: QuerySet) -> tuple[int, float]:
    """Delete ``batch``; return how many rows, and the seconds its DELETE ran.

    The rows stay locked until the COMMIT that follows, but a commit costs
    the same (a flush to disk) however many rows it ends: were it counted,
    a disk slower to flush than the budget would cut batches to one row.
    """
    took = 0.0

    def timed(execute: Callable[..., Any], *args: Any) -> Any:
        nonlocal took
        began = perf_counter()
        try:
            return execute(*args)
        finally:
            took += perf_counter() - began

    with connections[batch.db].execute_wrapper(timed):
        rows = batch.delete()[0]
    return rows, took


def _batch_end(old: QuerySet, after: int, size: int) -> int | None:
    """The key that ends the next ``size`` rows of ``old`` past ``after``.

    Only that one key comes back, not the batch's, which halved the read
    of 2,000 keys on MariaDB. When fewer rows are left, the last of them
    ends the batch; ``None`` when none is.
    """
    rest = old.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)
    end: int | None = rest[size - 1 : size].first()
    if end is None:
        end = rest.aggregate(last=Max("pk"))["last"]
    return end


def _next_size(size: int, took: float, budget: float, cap: int) -> int:
    """Rows for the next DELETE, aimed at ``budget`` seconds by the last's ``took``.

    A DELETE's time grows with its rows: each row is an entry to remove
    from the table and from each of its indexes. What a row costs follows
    the machine's load (other work for the CPUs, the purge of the rows just
    deleted, pages read from a busy disk), which drifts over seconds, so a
    fixed count that is quick on a quiet machine holds its locks for
    hundreds of milliseconds on a busy one. The size follows the load
    instead: cut at once in proportion after a DELETE that ran long, and at
    most doubled after a quick one, which may only have found its pages
    cached.
    """
    aimed = int(size * budget / took)
    return max(1, min(aimed, 2 * size, cap))
