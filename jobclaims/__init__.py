"""Make a scheduled Django job safe to run twice.

This module is jobclaims' public face: what a project imports is named
here, and keeps working within a major version::

    from jobclaims import JobCommand, Schedule, claim, claimed, window_key

Besides it, ``jobclaims.models``, ``jobclaims.testing``,
``jobclaims.signals``, ``jobclaims.conf`` and the ``jobclaims.contrib``
modules are public. Every other module is internal: docs/architecture.md
says what each holds.

The exceptions are importable before Django's apps are ready; every other
name loads its module when first asked for, since most of them need the
models, which Django's app loading must have read first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jobclaims.exceptions import (
    ClaimFailed,
    ClaimLost,
    EditConflict,
    JobCancelled,
    JobInterrupted,
    JobTimedOut,
    LeaseLapsed,
    NotClaimed,
    PausedBeforeStart,
    StandbyTimeout,
    UnknownClaim,
    UnknownJob,
)

if TYPE_CHECKING:
    from jobclaims.claims.batch import Fire
    from jobclaims.claims.naming import ALL_JOBS
    from jobclaims.claims.rule import PauseNote, Reason, Refusal
    from jobclaims.controls.pauses import pause, resume
    from jobclaims.controls.pruning import prune
    from jobclaims.controls.retiring import retire
    from jobclaims.controls.schedule_edits import add_schedule, change_schedule, delete_schedule
    from jobclaims.jobs.claiming import claim, claimed, window_key
    from jobclaims.jobs.commands import JobCommand
    from jobclaims.jobs.discovery import known_jobs, scheduled_jobs, schedules_of
    from jobclaims.jobs.schedules import JobSchedule, Misfire, Overlap, Schedule
    from jobclaims.jobs.task_schedules import scheduled
    from jobclaims.monitoring.health import missed_windows, read_health
    from jobclaims.monitoring.overview import JobOverview, overview
    from jobclaims.time.slots import Slots

#: Each public name that needs the models, by the module that defines it.
_LOADED_WHEN_ASKED = {
    "JobCommand": "jobclaims.jobs.commands",
    "Schedule": "jobclaims.jobs.schedules",
    "Misfire": "jobclaims.jobs.schedules",
    "Overlap": "jobclaims.jobs.schedules",
    "JobSchedule": "jobclaims.jobs.schedules",
    "claim": "jobclaims.jobs.claiming",
    "claimed": "jobclaims.jobs.claiming",
    "window_key": "jobclaims.jobs.claiming",
    "scheduled": "jobclaims.jobs.task_schedules",
    "Slots": "jobclaims.time.slots",
    "known_jobs": "jobclaims.jobs.discovery",
    "scheduled_jobs": "jobclaims.jobs.discovery",
    "schedules_of": "jobclaims.jobs.discovery",
    "overview": "jobclaims.monitoring.overview",
    "JobOverview": "jobclaims.monitoring.overview",
    "read_health": "jobclaims.monitoring.health",
    "missed_windows": "jobclaims.monitoring.health",
    "ALL_JOBS": "jobclaims.claims.naming",
    "pause": "jobclaims.controls.pauses",
    "resume": "jobclaims.controls.pauses",
    "retire": "jobclaims.controls.retiring",
    "prune": "jobclaims.controls.pruning",
    "add_schedule": "jobclaims.controls.schedule_edits",
    "change_schedule": "jobclaims.controls.schedule_edits",
    "delete_schedule": "jobclaims.controls.schedule_edits",
    "Refusal": "jobclaims.claims.rule",
    "Fire": "jobclaims.claims.batch",
    "Reason": "jobclaims.claims.rule",
    "PauseNote": "jobclaims.claims.rule",
}

__all__ = [
    "ALL_JOBS",
    "ClaimFailed",
    "ClaimLost",
    "EditConflict",
    "Fire",
    "JobCancelled",
    "JobCommand",
    "JobInterrupted",
    "JobOverview",
    "JobSchedule",
    "JobTimedOut",
    "LeaseLapsed",
    "Misfire",
    "NotClaimed",
    "Overlap",
    "PauseNote",
    "PausedBeforeStart",
    "Reason",
    "Refusal",
    "Schedule",
    "Slots",
    "StandbyTimeout",
    "UnknownClaim",
    "UnknownJob",
    "add_schedule",
    "change_schedule",
    "claim",
    "claimed",
    "delete_schedule",
    "known_jobs",
    "missed_windows",
    "overview",
    "pause",
    "prune",
    "read_health",
    "resume",
    "retire",
    "scheduled",
    "scheduled_jobs",
    "schedules_of",
    "window_key",
]


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use (PEP 562)."""
    try:
        module = _LOADED_WHEN_ASKED[name]
    except KeyError:
        raise AttributeError(f"module 'jobclaims' has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LOADED_WHEN_ASKED})
