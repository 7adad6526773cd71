"""Windows of a job that no instance ever claimed: the runs lost to a deploy,
an outage or a broken crontab.

A skip is visible (``JobSkip``); a run that never started leaves no row at
all, so the gaps are found by listing the windows a job's schedule has had
since its first claim and taking away those that have a claim. A job with a
``schedule`` lists its fire times instead (``jobclaims.schedules.overview``).
"""

from __future__ import annotations

from contextlib import suppress

from jobclaims.clock import database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun
from jobclaims.schedules import JobSchedule, overview
from jobclaims.windows import from_name

#: The status command and the admin look back this many windows at most.
LOOK_BACK = 1000


def missed_windows(job: str) -> list[str]:
    """Keys of ``job``'s windows that ended unclaimed, oldest first.

    Looks from the job's oldest finished claim (or ``LOOK_BACK`` windows ago,
    if that is later) to the window now running by the database clock, which
    is not missed yet. Pruning deletes finished rows from the oldest on, so
    the oldest one left marks how far back the history is whole; a dead
    claim older than it is a straggler, not the start. Jobs whose claims
    recorded no schedule, or one that names no window, have no known windows.
    """
    if (scheduled := _scheduled(job)) is not None:
        # Each fire is a window: the schedule lists them, not a window name.
        db = jobclaims_settings.claims_database(JobRun)
        return overview(scheduled, database_now(db)).missed
    runs = JobRun.objects.filter(job=job).exclude(schedule="")
    oldest_first = runs.order_by("claimed_at")
    first = oldest_first.finished().first() or oldest_first.first()
    if first is None:
        return []
    try:
        window = from_name(first.schedule)
    except ValueError:
        # A schedule no window has (a window under a second was once
        # recorded as "0-second"): its windows cannot be listed.
        return []
    now = database_now(runs.db)
    start = first.claimed_at
    with suppress(OverflowError):  # A window so long that the look-back predates year 1.
        start = max(start, now - LOOK_BACK * window.longest)
    keys = window.keys_between(start, now)[-LOOK_BACK:]
    claimed = set(JobRun.objects.filter(job=job, window__in=keys).values_list("window", flat=True))
    return [key for key in keys if key not in claimed]


def _scheduled(job: str) -> JobSchedule | None:
    """``job``'s schedule, if its fires are windows of their own."""
    from jobclaims.scheduler import schedule_of

    scheduled = schedule_of(job)
    return scheduled if scheduled is not None and scheduled.window is None else None
