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
- a process started without a scheduler learns it at its heartbeat's next
  renewal (within a third of the lease), which is refused: it stops its
  own run the same way (``stopping.SelfStop``).

A cancelled run is not a failure: it is not retried, and health does not
count it. Its window is open again, as a failed one is, to a rerun.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobclaims.exceptions import JobCancelled
from jobclaims.models import JobRun


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
