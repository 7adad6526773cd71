"""The stored schedules as the scheduler runs them, and the count of their changes.

A ``StoredSchedule`` row becomes the ``JobSchedule`` a ``Schedule`` of its
command's ``schedules`` would (``job_of()``): its claims are named
``command[name]``, and it takes the command's lease, window, retries and
misfire policy. The code's schedules come first: a stored one whose claim
name a deploy's code schedules too is left out, named as a problem, and
the code's runs (``docs/howto/stored-schedules.md``).

``generation()`` is what a scheduler polls to learn of a change, one row
whatever the number of schedules; ``count_a_change()`` is what every
change runs in its transaction (``jobclaims.controls.schedule_edits``).
"""

from __future__ import annotations

import dataclasses
import secrets
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from django.db.models import F

from jobclaims.jobs import task_schedules
from jobclaims.jobs.schedules import JobSchedule, Schedule, ScheduledCommand, overlap_problem
from jobclaims.models import StoredSchedule, StoredSchedulesGeneration

#: The generation row's primary key: there is one row.
GENERATION_ROW = 1


def generation() -> int:
    """How many changes the stored schedules have had (0: none yet)."""
    numbers = StoredSchedulesGeneration.objects.filter(pk=GENERATION_ROW)
    return numbers.values_list("number", flat=True).first() or 0


def count_a_change() -> None:
    """Add one to the generation, in the transaction of the change it counts.

    Its row is made at the first change (a flush empties the table too):
    two first changes at once both insert-if-absent, then both add one. A
    row made anew starts at a random number, not at 0: a scheduler that
    read the number of the row a flush deleted must not read it again
    after as many changes, and take the schedules for unchanged.
    """
    rows = StoredSchedulesGeneration.objects
    if not rows.filter(pk=GENERATION_ROW).update(number=F("number") + 1):
        fresh = StoredSchedulesGeneration(pk=GENERATION_ROW, number=secrets.randbits(48))
        rows.bulk_create([fresh], ignore_conflicts=True)
        rows.filter(pk=GENERATION_ROW).update(number=F("number") + 1)


def entry_of(stored: StoredSchedule) -> Schedule:
    """``stored`` as a ``Schedule`` of its command's or task's; ``ValueError``
    naming the fix for arguments that cannot be read."""
    return Schedule(
        stored.expression,
        args=_task_args(stored) if stored.task else _shell_words(stored.arguments),
        kwargs=_task_kwargs(stored) if stored.task else {},
        time_zone=stored.time_zone or None,
        name=stored.name,
        start=stored.start or None,
        end=stored.end or None,
        skip_dates=stored.skip_dates.replace(",", " ").split(),
        max_runs=stored.max_runs,
        overlap=stored.overlap or None,
    )


def job_of(
    stored: StoredSchedule,
    commands: Mapping[str, ScheduledCommand],
    code_jobs: Iterable[JobSchedule],
) -> JobSchedule:
    """What the scheduler runs for ``stored``; ``ValueError`` naming the fix
    when it cannot run: it names no command of ``commands`` (the
    ``JobCommand``s, by name) nor a task, or both, its fields cannot be
    read, or the code schedules its claim name (``code_jobs``)."""
    if stored.task and (stored.command or stored.arguments):
        raise ValueError(
            "a schedule runs a command or enqueues a task, not both; empty its command and "
            "arguments, or its task"
        )
    job = _task_job(stored) if stored.task else _command_job(stored, commands)
    if any(each.job == job.job for each in code_jobs):
        raise ValueError(
            f"the code schedules {job.job} already, which runs in this one's place; "
            "give this one another name, or delete it"
        )
    return job


def _command_job(stored: StoredSchedule, commands: Mapping[str, ScheduledCommand]) -> JobSchedule:
    command = commands.get(stored.command)
    if command is None:
        known = ", ".join(sorted(commands)) or "none is defined yet"
        raise ValueError(
            f"no JobCommand is named {stored.command!r}; name one of: {known}, or a task"
        )
    entry = entry_of(stored)
    if entry.overlap is not None and (problem := overlap_problem(entry.overlap, type(command))):
        raise ValueError(problem)
    entry = dataclasses.replace(entry, time_zone=entry.time_zone or type(command).time_zone)
    return JobSchedule.of_entry(command, stored.command, entry)


def _task_job(stored: StoredSchedule) -> JobSchedule:
    """A task schedule's ``JobSchedule``, as ``@scheduled`` would declare it:
    one schedule of the task, named ``stored.name``."""
    declared = task_schedules.Declared(
        stored.task, f"stored schedule {stored.name!r}", schedules=[entry_of(stored)]
    )
    [job] = task_schedules.build(declared)  # ValueError naming the fix, as for code.
    return job


def _shell_words(arguments: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(arguments))
    except ValueError as error:
        raise ValueError(f"arguments {arguments!r}: {error}; quote them as in a shell") from None


def _task_args(stored: StoredSchedule) -> tuple[Any, ...]:
    if not isinstance(stored.task_args, list):
        raise ValueError(f'task_args {stored.task_args!r} must be a JSON list, like ["eu", 3]')
    return tuple(stored.task_args)


def _task_kwargs(stored: StoredSchedule) -> dict[str, Any]:
    if not isinstance(stored.task_kwargs, dict):
        raise ValueError(
            f'task_kwargs {stored.task_kwargs!r} must be a JSON object, like {{"region": "eu"}}'
        )
    return dict(stored.task_kwargs)


def stored_jobs(
    commands: Mapping[str, ScheduledCommand], code_jobs: list[JobSchedule]
) -> tuple[list[JobSchedule], dict[str, str]]:
    """Each stored schedule that can run, and what is wrong with each
    other one by its claim name, naming the fix (``job_of()``)."""
    jobs, problems = [], {}
    for stored in StoredSchedule.objects.all():
        try:
            jobs.append(job_of(stored, commands, code_jobs))
        except ValueError as error:
            problems[str(stored)] = f"Stored schedule {stored}: {error}"
    return jobs, problems
