"""Cancelling a run from any host: its row ends cancelled, and its process is told.

``jobclaims_cancel`` and the admin's action write one compare-and-set
UPDATE (``JobRunQuerySet.cancel()``): the row is ``cancelled``, with who
cancelled it and when, from that commit. Whatever the run still writes
under its claim needs its row running under its token, so its fenced
writes (``run.fenced()``), its renewals and its outcome are refused from
that moment, on every host, whatever its process does. Then its process
is told:

- a scheduler reads, at each turn of its loop (every ``scheduler.WATCH``
  while jobs run), which of its children's runs were cancelled, and sends
  each one's process SIGTERM, then SIGKILL after the job's
  ``timeout_grace``;
- a process started without a scheduler learns it within about a second,
  whatever its lease: its heartbeat reads the run's row by primary key
  between renewals (``heartbeat.CANCEL_POLL``). It stops its own run the
  same way (``stopping.SelfStop``); a Celery task's body is
  stopped by an exception raised in its thread instead, since a pool
  process's SIGTERM is its worker's (``jobclaims.contrib.celery``).

The cancel leaves the run's lease, and its hold on the job, as they were:
its process may still be working, and a rerun must not overlap it. Once
the run has stopped, its process lets go (``let_go()``, from ``holding()``
as the run ends): the lease ends then, or, if the process died, when it
runs out, since it is no longer renewed.

A cancelled run is not a failure: it is not retried, and health does not
count it. Once let go, its window is open again, as a failed one is, to a
rerun.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q

from jobclaims.exceptions import JobCancelled
from jobclaims.models import JobRun
from jobclaims.time.clock import DatabaseNow


def cancel(job: str, window: str | None = None, *, by: str) -> int:
    """Cancel ``job``'s running runs (of one ``window``); return how many.

    Raises ``UnknownClaim`` for a job or window never claimed.
    """
    return JobRun.objects.claims_of(job, window).cancel(by)


def cancellation(run: JobRun) -> JobCancelled | None:
    """Who cancelled ``run`` and when, if an operator did: one indexed read."""
    row = (
        JobRun.objects.using(run._state.db)
        .filter(pk=run.pk, token=run.token, status=JobRun.Status.CANCELLED)
        .values_list("cancelled_by", "cancelled_at")
        .first()
    )
    return None if row is None else JobCancelled(*row)


def cancelled_among(runs: Iterable[JobRun]) -> set[int]:
    """The primary keys of those of ``runs`` an operator cancelled: one read."""
    tokens = {run.pk: run.token for run in runs}
    if not tokens:
        return set()
    rows = JobRun.objects.filter(pk__in=list(tokens), status=JobRun.Status.CANCELLED)
    return {pk for pk, token in rows.values_list("pk", "token") if tokens[pk] == token}


def let_go(run: JobRun) -> bool:
    """End the lease of ``run`` if an operator cancelled it: its process
    stopped working on it, so a rerun of its window may start now.

    One compare-and-set UPDATE on the run's token, which changes nothing
    (and returns ``False``) unless the run is cancelled and still holds.
    """
    db = run._state.db
    held = Q(expires_at__gt=DatabaseNow()) | Q(holds_job__isnull=False)
    cancelled = JobRun.objects.using(db).filter(
        held, pk=run.pk, token=run.token, status=JobRun.Status.CANCELLED
    )
    return bool(cancelled.update(expires_at=DatabaseNow(), holds_job=None))
