"""What operators see of a schedule: its next fires, its last run, its missed fires.

Read by ``jobclaims_scheduler --list``, ``jobclaims_status --schedules``, the
admin and health (``jobclaims.health.checked_overview``); written out as text
and JSON by ``jobclaims.overview_output``.
"""

from __future__ import annotations

import datetime
import itertools
from dataclasses import dataclass, field

from jobclaims.models import JobRun
from jobclaims.schedules import ON_TIME, JobSchedule


@dataclass(frozen=True)
class JobOverview:
    """What operators see of a scheduled job: where the health checks look too."""

    schedule: JobSchedule
    #: The next fire times, soonest first.
    next_fires: list[datetime.datetime]
    #: The job's newest claim, with ``state`` annotated (``jobclaims.claims.rule``).
    last_run: JobRun | None
    #: Keys of recent fires no instance claimed, oldest first.
    missed: list[str]
    #: Keys of recent fires claimed later than ``ON_TIME``: caught up.
    caught_up: list[str]
    #: What is wrong with the job ("overdue: ...", "failed: ..."): see ``health.checked_overview``.
    problems: list[str] = field(default_factory=list)


#: The overview looks back this many fires.
OVERVIEW_FIRES = 50


def overview(
    job: JobSchedule, now: datetime.datetime, *, upcoming: int = 3, fires: int = OVERVIEW_FIRES
) -> JobOverview:
    """``job``'s schedule, next fires, last run and missed fires at ``now``,
    among its latest ``fires``.

    Fires are counted from the job's first claim on, and a fire not yet
    ``ON_TIME`` old is not missed yet.
    """
    runs = JobRun.objects.filter(job=job.job)
    last = runs.with_state().order_by("-claimed_at").first()
    first = runs.order_by("claimed_at").first()
    missed: list[str] = []
    caught_up: list[str] = []
    if first is not None:
        # History starts at the fire the job's first claim was for.
        start = job.cron.latest_fire(first.claimed_at) or first.claimed_at
        recent = [
            (fire, job.slots.key_at(fire))
            for fire in itertools.islice(job.cron.fires_before(now - ON_TIME), fires)
            if fire >= start
        ]
        claimed_at = dict(
            runs.filter(window__in=[key for _, key in recent]).values_list("window", "claimed_at")
        )
        for fire, key in reversed(recent):
            if key not in claimed_at:
                missed.append(key)
            elif claimed_at[key] - fire > ON_TIME:
                caught_up.append(key)
    return JobOverview(
        schedule=job,
        next_fires=list(itertools.islice(job.cron.fires_after(now), upcoming)),
        last_run=last,
        missed=missed,
        caught_up=caught_up,
    )
