"""Pausing a job, and resuming it: what operators do while a vendor is down.

A pause is a ``JobPause`` row. Every claim asks for its job's pauses
before it takes any claim row, in its own INSERT where it starts with one
(``jobclaims.claims.engine``), so a paused job is refused,
with the reason ``paused``, however it starts: the scheduler on any host, a
crontab line, a Celery task, ``@claimed`` or ``claim()``. The claim asks
again once it committed, so one that committed after the pause gives its
row back: from the pause's commit no claim of the job wins, on any
database. And every run asks right before it starts
(``jobclaims.running.holding.start_unpaused()``): one claimed before the
pause does not start after it. A run that had started before the pause
committed goes on to its end.

Only a job that exists (``jobclaims.jobs.discovery``) can be paused, so
that a typo is not a pause that holds nothing; or all jobs at once, a
maintenance window: a pause of ``ALL_JOBS``, a name no job can have, which
every claim asks for in the same read as its own job's pauses. It is
lifted by resuming ``ALL_JOBS``; resuming one job leaves it in force.
Or every job with a tag (``JobCommand.tags``): a pause of ``#billing``,
which every claim of a job tagged ``billing`` asks for through the job's
``JobTag`` rows, in the same read; lifted by resuming ``#billing``.
"""

from __future__ import annotations

import datetime
import getpass
import os

from django.db import transaction

from jobclaims.claims.naming import ALL_JOBS, TAG_MARK
from jobclaims.claims.rule import Reason
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import UnknownJob
from jobclaims.jobs.discovery import known_tags, record_tags, require_known
from jobclaims.models import JobPause, JobRun, JobSkip
from jobclaims.time.clock import DatabaseNow, database_now

#: The longest reason a pause keeps, in characters, however it is given: a
#: reason is for the other operators, and every refused start prints it.
REASON_LENGTH = 1000


def pause(
    job: str, *, by: str, reason: str = "", until: datetime.datetime | None = None
) -> JobPause:
    """Pause ``job`` until it is resumed, or until ``until``; return the pause.

    ``ALL_JOBS`` pauses every job, whatever its own pauses; ``#billing``
    (``naming.tag_pause("billing")``) every job tagged ``billing``
    (``JobCommand.tags``), as the code tags them now. A pause of a
    job already paused takes the place of the one in force, which is
    recorded as resumed by ``by``. Raises ``UnknownJob`` for a job
    jobclaims does not know, and ``ValueError`` for a reason longer than
    ``REASON_LENGTH`` or an ``until`` already past by the database clock;
    nothing is written then.
    """
    if problem := reason_problem(reason):
        raise ValueError(problem)
    _require_known(job)
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


def reason_problem(reason: str) -> str | None:
    """Why ``reason`` cannot be a pause's, naming the fix; None if it can."""
    if len(reason) <= REASON_LENGTH:
        return None
    return (
        f"the reason is {len(reason)} characters long, longer than the {REASON_LENGTH} "
        "a pause keeps; shorten it"
    )


def resume(job: str, *, by: str) -> int:
    """Let ``job`` start again; return how many pauses in force were ended.

    A pause of ``ALL_JOBS`` still holds ``job`` until ``ALL_JOBS`` is
    resumed too: ``in_force(ALL_JOBS)`` says whether it does. Raises
    ``UnknownJob`` for a job jobclaims does not know: nothing is written
    then.
    """
    _require_known(job)
    pauses = JobPause.objects.db_manager(_claims_database())
    return pauses.in_force().filter(job=job).update(resumed_by=by, resumed_at=DatabaseNow())


def in_force(job: str) -> JobPause | None:
    """The newest pause of ``job`` itself in force, if there is one:
    ``ALL_JOBS`` for the pause of all jobs."""
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


def _require_known(job: str) -> None:
    """Raise ``UnknownJob`` unless ``job`` is a job jobclaims knows,
    ``ALL_JOBS``, or the pause of a tag some job has; record the code's
    tags for the last (``record_tags()``): a host whose deploy did not
    migrate pauses the jobs its code tags all the same."""
    if job == ALL_JOBS:
        return
    if not job.startswith(TAG_MARK):
        require_known(job)
        return
    record_tags()
    if job not in known_tags():
        tags = ", ".join(sorted(tag.removeprefix(TAG_MARK) for tag in known_tags())) or "none"
        raise UnknownJob(
            f"no job is tagged {job.removeprefix(TAG_MARK)!r}; the tags are: {tags} "
            "(JobCommand.tags)"
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
