"""Pausing a job, and resuming it: what operators do while a vendor is down.

A pause is a ``JobPause`` row. Every claim asks for its job's pauses
before it takes any claim row, in its own INSERT where it starts with one
(``jobclaims.claims.engine``), so a paused job is refused,
with the reason ``paused``, however it starts: the scheduler on any host, a
crontab line, a Celery task, ``@claimed`` or ``claim()``. A run that had
started before the pause committed goes on to its end.

Only a job jobclaims knows can be paused, so that a typo is not a pause
that holds nothing: the jobs that are management commands, the Celery tasks
that claim, and any job with a claim or a pause recorded.
"""

from __future__ import annotations

import datetime
import getpass
import os
import sys

from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand
from django.db import transaction

from jobclaims import schedule_names
from jobclaims.claims.rule import Reason
from jobclaims.clock import DatabaseNow, database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import UnknownJob
from jobclaims.models import JobPause, JobRun, JobSkip
from jobclaims.schedules import entries


def pause(
    job: str, *, by: str, reason: str = "", until: datetime.datetime | None = None
) -> JobPause:
    """Pause ``job`` until it is resumed, or until ``until``; return the pause.

    A pause of a job already paused takes the place of the one in force,
    which is recorded as resumed by ``by``. Raises ``UnknownJob`` for a job
    jobclaims does not know, and ``ValueError`` for an ``until`` already
    past by the database clock; nothing is written then.
    """
    known(job)
    db = _claims_database()
    if until is not None and until <= database_now(db):
        raise ValueError(
            f"--until {until.isoformat()} has passed already; give a time still to come, "
            "or leave --until out to pause until you resume the job"
        )
    pauses = JobPause.objects.db_manager(db)
    with transaction.atomic(using=db):
        pauses.in_force().filter(job=job).update(resumed_by=by, resumed_at=DatabaseNow())
        return pauses.create(job=job, paused_by=by, reason=reason, until=until)


def resume(job: str, *, by: str) -> int:
    """Let ``job`` start again; return how many pauses in force were ended.

    Raises ``UnknownJob`` for a job jobclaims does not know: nothing is
    written then.
    """
    known(job)
    pauses = JobPause.objects.db_manager(_claims_database())
    return pauses.in_force().filter(job=job).update(resumed_by=by, resumed_at=DatabaseNow())


def in_force(job: str) -> JobPause | None:
    """The newest pause of ``job`` in force, if the job is paused."""
    pauses = JobPause.objects.db_manager(_claims_database())
    return pauses.in_force().filter(job=job).order_by("-paused_at", "-pk").first()


def refused_windows(job: str, keys: list[str]) -> set[str]:
    """Which of ``job``'s windows ``keys`` a pause refused.

    A scheduler counts them as settled, the way it counts a claimed fire:
    a fire an operator kept from running is not caught up after the resume
    by the misfire policy. Backfill one that must run (``jobclaims_run``).
    """
    skips = JobSkip.objects.using(_claims_database()).filter(
        job=job, window__in=keys, reason=Reason.PAUSED
    )
    return set(skips.values_list("window", flat=True))


def known(job: str) -> None:
    """Raise ``UnknownJob``, naming the jobs that exist, unless ``job`` is one."""
    in_code = _named_in_code()
    if job in in_code or _recorded(job):
        return
    recorded = JobRun.objects.using(_claims_database()).values_list("job", flat=True).distinct()
    names = sorted(in_code | set(recorded))
    shown = ", ".join(names[:20]) + (", …" if len(names) > 20 else "")
    raise UnknownJob(
        f"no job is named {job!r}; name one of: {shown or 'none (no job is defined yet)'}"
    )


def os_user() -> str:
    """Who runs this command, as the operating system knows them."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # A uid without a passwd entry (a container).
        return f"uid {os.getuid()}"


def _claims_database() -> str:
    """Where claims are written, which every claim reads its pauses from."""
    return jobclaims_settings.claims_database(JobRun)


def _recorded(job: str) -> bool:
    db = _claims_database()
    return (
        JobRun.objects.using(db).filter(job=job).exists()
        or JobPause.objects.using(db).filter(job=job).exists()
    )


def _named_in_code() -> set[str]:
    """The claim names of the jobs defined in code: ``JobCommand`` commands,
    each schedule of one with several, and, when Celery is in use, the
    tasks based on ``ClaimedTask``."""
    from jobclaims.commands import JobCommand

    names = set()
    for name, app in get_commands().items():
        command = app if isinstance(app, BaseCommand) else load_command_class(app, name)
        if isinstance(command, JobCommand):
            job = command.job_name or name
            names.add(job)
            names.update(
                schedule_names.claim_name(job, each.given_name)
                for each in entries(type(command))
                if each.given_name
            )
    return names | _claimed_tasks()


def _claimed_tasks() -> set[str]:
    if "celery" not in sys.modules:
        return set()
    from celery import current_app

    from jobclaims.contrib.celery import ClaimedTask

    return {name for name, task in current_app.tasks.items() if isinstance(task, ClaimedTask)}
