"""A schedule's overview as operators read it: lines of text, or a JSON document."""

from __future__ import annotations

from jobclaims.overview import JobOverview


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
