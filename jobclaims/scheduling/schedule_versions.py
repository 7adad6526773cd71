"""When each job's schedule came into force, so catching up never reaches before it.

A scheduler records, as it starts, one ``ScheduleVersion`` row per job and
schedule: insert-if-absent, so a fleet of hosts with one schedule writes
one row, its ``since`` from the database clock of the first. A schedule
that comes back into force (an edit reverted) starts anew: the fires of
the schedule in between were never this one's.
"""

from __future__ import annotations

import datetime
import hashlib

from django.conf import settings

from jobclaims.jobs.schedules import JobSchedule
from jobclaims.models import ScheduleVersion
from jobclaims.time import expressions
from jobclaims.time.bounds import Bounded
from jobclaims.time.clock import DatabaseNow


def fingerprint(expression: str, time_zone: str | None = None, limits: str = "") -> str:
    """A digest of what decides a schedule's fire times: its fires as its
    kind reads them (``FireTimes.fires``: a deploy that respells ``*/3`` as
    ``0-59/3`` changes no fire, so no version), the zone (``time_zone``,
    else ``TIME_ZONE``) and its bounds, if any (``Bounded.bounds``)."""
    text = f"{expressions.read(expression).fires}\n{time_zone or settings.TIME_ZONE}"
    if limits:
        text += f"\n{limits}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint_of(job: JobSchedule) -> str:
    """The digest of ``job``'s schedule. Each of a job's several schedules
    has its own rows, under its own claim name."""
    limits = job.cron.bounds if isinstance(job.cron, Bounded) else ""
    return fingerprint(job.cron.expression, job.cron.time_zone, limits)


def in_force_since(job: JobSchedule) -> datetime.datetime:
    """When ``job``'s schedule came into force, recording it now if it is new."""
    versions = ScheduleVersion.objects.filter(job=job.job)
    mine = fingerprint_of(job)
    newest = versions.order_by("-since").values_list("fingerprint", "since").first()
    if newest is not None and newest[0] == mine:
        return newest[1]
    ScheduleVersion.objects.bulk_create(
        [ScheduleVersion(job=job.job, fingerprint=mine, schedule=job.cron.expression[:255])],
        ignore_conflicts=True,
    )
    if newest is not None:
        # In force again after another schedule, or first recorded just now.
        versions.filter(fingerprint=mine).update(since=DatabaseNow())
    return versions.get(fingerprint=mine).since
