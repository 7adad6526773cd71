"""Ending a held claim by hand, so that the job's next run takes it over.

A holder that hangs keeps its window until its lease runs out. An operator
who knows it is stuck ends the lease now instead of waiting.
"""

from __future__ import annotations

from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun, JobRunQuerySet


class UnknownClaim(LookupError):
    """The job or the window named has no claim: likely a typo."""


def expire_held(job: str, window: str | None = None) -> int:
    """Expire ``job``'s active claims (of one ``window``); return how many.

    Raises ``UnknownClaim``, naming what does exist, when the job or the
    window has never been claimed: nothing is changed then.
    """
    # The database the jobs claim on: a replica could miss the holder.
    claims = JobRun.objects.using(jobclaims_settings.claims_database(JobRun))
    runs = claims.filter(job=job)
    if not runs.exists():
        raise UnknownClaim(f"no claim of job {job!r} exists; {_known_jobs(claims)}")
    if window is not None:
        if not runs.filter(window=window).exists():
            raise UnknownClaim(
                f"job {job!r} has no claim of window {window!r}; {_newest_windows(runs)}"
            )
        runs = runs.filter(window=window)
    return runs.active().expire()


def _known_jobs(claims: JobRunQuerySet, shown: int = 5) -> str:
    names = claims.order_by("job").values_list("job", flat=True).distinct()
    jobs = list(names[: shown + 1])
    if not jobs:
        return "no job has claimed anything yet"
    more = ", …" if len(jobs) > shown else ""
    return f"known jobs: {', '.join(jobs[:shown])}{more}"


def _newest_windows(runs: JobRunQuerySet, shown: int = 3) -> str:
    newest = runs.order_by("-claimed_at", "-pk").values_list("window", flat=True)
    return f"its newest windows: {', '.join(newest[:shown])}"
