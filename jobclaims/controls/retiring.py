"""Retiring a job: telling health that a job removed or renamed in the code
is gone, so that it stops being overdue forever, while its claims stay."""

from __future__ import annotations

from jobclaims.jobs.discovery import require_known
from jobclaims.models import RetiredJob


def retire(job: str, retired_by: str, reason: str = "") -> RetiredJob:
    """Record that ``job`` is retired, by whom and why; retiring it again
    records the new retirement in place of the old.

    Raises ``UnknownJob`` naming the jobs that exist, and writes nothing,
    for a name no job has (``jobclaims.jobs.discovery``).
    """
    require_known(job)
    RetiredJob.objects.filter(job=job).delete()
    return RetiredJob.objects.create(job=job, retired_by=retired_by, reason=reason)
