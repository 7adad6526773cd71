"""Retiring a job: telling health that a job removed or renamed in the code
is gone, so that it stops being overdue forever, while its claims stay."""

from __future__ import annotations

from jobclaims.health import known_jobs
from jobclaims.models import RetiredJob


class UnknownJob(ValueError):
    """A job to retire that health does not know: a typo, most likely."""


def retire(job: str, retired_by: str, reason: str = "") -> RetiredJob:
    """Record that ``job`` is retired, by whom and why; retiring it again
    records the new retirement in place of the old.

    Raises ``UnknownJob`` naming the known jobs, and writes nothing, when
    ``job`` has no claim and is not scheduled.
    """
    known = known_jobs()
    if job not in known:
        shown = ", ".join(known[:10]) or "none"
        raise UnknownJob(
            f"No job named {job!r} has a claim or a schedule; the known jobs are: {shown}."
        )
    RetiredJob.objects.filter(job=job).delete()
    return RetiredJob.objects.create(job=job, retired_by=retired_by, reason=reason)
