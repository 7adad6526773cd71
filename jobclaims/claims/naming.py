"""How each of a job's several schedules names its claims.

A job with ``schedules = [Schedule("0 * * * *", args=["--region", "eu"]),
Schedule("30 * * * *", args=["--region", "us"])]`` is several scheduled
jobs as far as claims go: each schedule claims under the job's name with
the schedule's name in brackets, ``sync_regions[--region eu]``, and keys its
fires as a single schedule does, by the fire's local time and offset. So
the unique ``(job, window)`` pair holds each schedule to one run per fire,
while two schedules never meet: not in a window, not in the overlap rule
(a run of one holds its own name only) and not in the slot rule (each
schedule's slots are its own, an interval of time whatever key names it).

A schedule's name is its ``name=``, else its arguments joined by spaces,
else its cron expression: never its place in the list, so a deploy that
reorders the list keeps every schedule's claims, and one that edits an
expression keeps the claims of a schedule with arguments or a name.

A job with one ``schedule = "..."`` claims under the job's name alone, as
before schedules had names, and a pause of a job holds for every schedule
of it (``parent()``).

A name is not what a fire is, though: a deploy that renames a schedule (it
gains a ``name=``, or the job a ``job_name``, or a job's one ``schedule``
becomes a named one of its ``schedules``) runs, for as long as it rolls,
hosts that claim the same fires under two names. So each claim of a fire
also records its schedule's **series** (``series()``), a digest of what
the schedule is and a rename leaves as it is: the job's command, the
schedule's arguments, its expression and its zone. The series and the
fire's key are unique together, as the job's name and the key are: of a
fire claimed under both names at once, one claim wins. Two schedules of
one job differ in their arguments (a task's keyword arguments too),
expression or zone (two that do not are refused:
``jobclaims.jobs.schedules.problems()``), so their series never meet.

One name is no job's: ``ALL_JOBS``, the job of a pause of every job (an
operator's maintenance window). A claim under it is refused
(``jobclaims.claims.validation``), so a pause of all jobs can never be
taken for one job's, nor one job's for all. Nor is a name that starts with
``TAG_MARK``: ``#billing`` names the pause of every job tagged ``billing``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

#: The job a pause of every job is recorded under, which no claim may use:
#: no command, task or schedule name is a lone asterisk.
ALL_JOBS = "*"
#: What a tag's pause is named by, before the tag (``#billing``): no claim
#: may use a name that starts with it (``jobclaims.models.JobTag``).
TAG_MARK = "#"


def tag_pause(tag: str) -> str:
    """The job the pause of every job tagged ``tag`` is recorded under."""
    return f"{TAG_MARK}{tag}"


def pausing_jobs(job: str) -> dict[str, str]:
    """The jobs whose pause holds for a claim of ``job``, as the claim
    statements' parameters: the job itself (``job``, given by the claim),
    the job its schedule belongs to, and all jobs."""
    return {"parent_job": parent(job) or job, "all_jobs": ALL_JOBS}


def claim_name(job: str, schedule: str) -> str:
    """The job name the claims of ``job``'s schedule named ``schedule`` are recorded under."""
    return f"{job}[{schedule}]"


def series(
    command: str,
    args: Sequence[Any],
    expression: str,
    zone: str,
    kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The series of the fires of ``command``'s schedule ``expression`` in
    ``zone``, started with ``args`` (and, a task's, ``kwargs``): the same
    under any name the schedule or its job is given.

    A command's arguments are strings; a task's may be anything its queue
    takes, and count by their ``repr``. Keyword arguments add a line only
    where there are some, so a schedule without them keeps its series."""
    words = [each if isinstance(each, str) else repr(each) for each in args]
    lines = ["\0".join([command, *words]), " ".join(expression.split()), zone]
    if kwargs:
        lines.append(repr(sorted(kwargs.items())))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def parent(name: str) -> str | None:
    """The job a schedule's claim name belongs to; None for a job's own name."""
    job, bracket, rest = name.partition("[")
    if not bracket or not rest.endswith("]") or not job:
        return None
    return job
