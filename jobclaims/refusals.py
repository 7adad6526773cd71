"""Why a claim was refused, and when the run in its way lets go.

A runner that retries (Celery, Django's tasks, a Kubernetes Job's
``backoffLimit``) may be retrying a run that died: its row still holds the
window until its lease ends. Skipping then loses the window for good, since
no later instance of that window comes. ``read_refusal()`` tells such a
runner how long to wait: it reads, by the database's clock, the row that
refused the claim. One indexed read, sent only after a refusal.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db.models import Q

from jobclaims.clock import DatabaseNow, database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun, JobSkip

#: Come back this long after the lease's end, so the database's clock has
#: passed it when the claim is tried again.
MARGIN = datetime.timedelta(milliseconds=200)


@dataclass(frozen=True)
class Refusal:
    """What stood in a claim's way when it was read back."""

    job: str
    window: str
    #: A ``JobSkip.Reason``: held, succeeded or overlap.
    reason: str
    #: When the lease of the run in the way ends, by the database's clock;
    #: ``None`` when nothing in the way ends by itself (the window succeeded).
    held_until: datetime.datetime | None
    #: The database's clock as the rows were read.
    read_at: datetime.datetime

    def __str__(self) -> str:
        text = f"{self.job} {self.window}: {JobSkip.Reason(self.reason).label}"
        if self.held_until is not None:
            text += f" until {self.held_until.isoformat()}"
        return text

    def pause_until(self, deadline: datetime.datetime) -> datetime.timedelta | None:
        """How long to wait before trying the claim again, or ``None`` to give up.

        ``None`` when the window succeeded, or when the lease in the way ends
        after ``deadline`` (database clock): a live holder renews its lease,
        so waiting for it is bounded by the caller's deadline, not by it.
        """
        if self.held_until is None or self.held_until > deadline:
            return None
        return max(self.held_until - self.read_at, datetime.timedelta()) + MARGIN


def read_refusal(job: str, window: str, *, allow_overlap: bool = False) -> Refusal:
    """Read what refuses a claim of ``window`` of ``job`` now.

    The window's own row decides if it is done or held; otherwise the run
    of another window that holds the job (unless ``allow_overlap``). When
    nothing is in the way any more (the holder let go meanwhile), the
    refusal is "held" until now: try again at once.
    """
    db = jobclaims_settings.claims_database(JobRun)
    in_the_way = Q(job=job, window=window)
    if not allow_overlap:
        in_the_way |= Q(job=job, holds_job__isnull=False)
    rows = list(
        JobRun.objects.using(db)
        .filter(in_the_way)
        .annotate(read_at=DatabaseNow())
        .values("window", "status", "expires_at", "read_at")
    )
    read_at = rows[0]["read_at"] if rows else database_now(db)
    own = next((row for row in rows if row["window"] == window), None)
    if own is not None and own["status"] == JobRun.Status.SUCCEEDED:
        return Refusal(job, window, JobSkip.Reason.SUCCEEDED, None, read_at)
    for row in sorted(rows, key=lambda row: row["window"] != window):
        if row["status"] == JobRun.Status.RUNNING and row["expires_at"] > read_at:
            reason = JobSkip.Reason.HELD if row is own else JobSkip.Reason.OVERLAP
            return Refusal(job, window, reason, row["expires_at"], read_at)
    return Refusal(job, window, JobSkip.Reason.HELD, read_at, read_at)
