"""What operators see of a schedule: its next fires, its last run, its missed fires.

Read by ``jobclaims_scheduler --list``, ``jobclaims_status --schedules``, the
admin and health (``jobclaims.monitoring.health.checked_overview``); written out as lines
of text (``describe()``) or a JSON document (``as_document()``).
"""

from __future__ import annotations

import datetime
import itertools
from dataclasses import dataclass, field

from jobclaims.jobs.schedules import ON_TIME, JobSchedule
from jobclaims.models import JobRun


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


def describe(view: JobOverview) -> str:
    """A job's overview as a few lines of text, for ``--list`` and ``jobclaims_status``."""
    job = view.schedule
    lines = [
        f"{job.label}: {job.cron.expression} ({job.cron.describe()}, {job.time_zone}); "
        f"misfire: {job.misfire}" + (f"; jitter: up to {job.jitter}" if job.jitter else "")
    ]
    if job.args:
        lines.append(f"  args: {' '.join(job.args)}")
    upcoming = ", ".join(f"{job.cron.local(fire):%Y-%m-%d %H:%M:%S %Z}" for fire in view.next_fires)
    lines.append(f"  next: {upcoming or 'never'}")
    if view.last_run is None:
        lines.append("  last run: none yet")
    else:
        run = view.last_run
        lines.append(
            f"  last run: {run.window} {getattr(run, 'state', run.status)} (attempt {run.attempt})"
        )
    if view.missed:
        lines.append(f"  missed: {len(view.missed)}, the latest {view.missed[-1]}")
    if view.caught_up:
        lines.append(f"  caught up late: {len(view.caught_up)}, the latest {view.caught_up[-1]}")
    lines.extend(f"  ! {problem}" for problem in view.problems)
    return "\n".join(lines)


def as_document(view: JobOverview) -> dict[str, object]:
    """A job's overview for ``jobclaims_status --json``; times in ISO 8601, UTC."""
    job, run = view.schedule, view.last_run
    return {
        "job": job.job,
        "command": job.command,
        "schedule": job.cron.expression,
        "schedule_name": job.name or None,
        "args": list(job.args),
        "in_words": job.cron.describe(),
        "time_zone": job.time_zone,
        "misfire": job.misfire,
        "jitter_seconds": job.jitter.total_seconds() if job.jitter else None,
        "next_fires": [fire.isoformat() for fire in view.next_fires],
        "last_run": None
        if run is None
        else {
            "window": run.window,
            "state": getattr(run, "state", run.status),
            "attempt": run.attempt,
            "claimed_at": run.claimed_at.isoformat(),
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        },
        "missed": view.missed,
        "caught_up": view.caught_up,
        "problems": view.problems,
        "healthy": not view.problems,
    }
