"""Running a job now, or over a range of its windows: what an operator starts by hand.

Each window is claimed as usual, in this process, and the job's command
then runs under that claim, here too, the way the scheduler's child runs
under the scheduler's (``JobCommand --claim-token``). So a window another
operator, a scheduler or a crontab line holds or has finished is skipped,
never run twice, and a paused job is refused. A range runs oldest first,
one window at a time; a window refused because a run of another window
still holds the job is waited for, not skipped, since no later run would
come back to it.
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError

from jobclaims import job_discovery, schedule_names
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.clock import database_now
from jobclaims.commands import JobCommand, run_key, schedule_for_run, slots_of
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import UnknownJob
from jobclaims.models import JobRun
from jobclaims.schedules import entries
from jobclaims.slots import Slots

#: The longest a window held up by a run of another window waits between looks.
LONGEST_LOOK = 1.0


@dataclass(frozen=True)
class Target:
    """A job that is a ``JobCommand``: the command that runs it and its claim
    name; for one of a job's several schedules, that schedule's."""

    command: str
    job: JobCommand
    #: The schedule's name, for one of a job's several schedules.
    schedule: str | None = None
    #: What the schedule starts the job's command with.
    args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The name the job's (or the schedule's) claims are recorded under."""
        job = self.job.job_name or self.command
        return job if self.schedule is None else schedule_names.claim_name(job, self.schedule)

    @functools.cached_property
    def slots(self) -> Slots:
        """How the job's (or the schedule's) time is cut, or ``CommandError`` naming the fix."""
        return slots_of(self.job, schedule_for_run(self.job, self.schedule))


@dataclass
class Tally:
    """What a run by hand did with each window it was given."""

    ran: list[str] = field(default_factory=list)
    skipped: list[tuple[str, Refusal]] = field(default_factory=list)
    #: The pause that stopped the run, if one did.
    paused: Refusal | None = None


def target(name: str) -> Target:
    """The ``JobCommand`` named ``name`` (its command's or its claims' name).

    Raises ``UnknownJob`` naming the jobs that are, for any other name.
    """
    jobs = job_commands()
    for each in jobs:
        if name in (each.command, each.name):
            return each
        for entry in entries(type(each.job)):
            one = Target(each.command, each.job, entry.given_name, tuple(entry.args))
            if entry.given_name and name == one.name:
                return one
    shown = ", ".join(sorted(each.command for each in jobs)) or "none (no JobCommand is defined)"
    raise UnknownJob(f"no job command is named {name!r}; name one of: {shown}")


def job_commands() -> list[Target]:
    """Every management command that is a ``JobCommand``."""
    return [Target(name, command) for name, command in job_discovery.job_commands().items()]


def current_key(job: Target) -> str:
    """The key of the job's current window, or of its latest fire due."""
    return run_key(job.name, job.slots, None)


class WindowFailed(Exception):
    """The job raised in one window of a run by hand: the later ones were not run."""

    def __init__(self, key: str, error: Exception):
        super().__init__(f"{key}: {error!s:.200}")
        self.key = key


def keys_between(
    job: Target, start: datetime.datetime, end: datetime.datetime | None = None
) -> list[str]:
    """Keys of the job's windows (or fires) from ``start`` to ``end`` (by
    default now), both included, oldest first.

    Raises ``ValueError`` naming the fix for an empty or reversed range, or
    one that ends after now by the database clock: a window that has not
    come yet cannot be run early, and its own run would then be skipped.
    """
    now = database_now(jobclaims_settings.claims_database(JobRun))
    end = now if end is None else end
    if end < start:
        raise ValueError(f"--to {end.isoformat()} is before --from {start.isoformat()}")
    if end > now:
        raise ValueError(
            f"--to {end.isoformat()} has not come yet by the database clock; "
            "leave --to out to end the range now"
        )
    keys = job.slots.keys_through(start, end)
    if not keys:
        raise ValueError(f"{job.name} has no fire from {start.isoformat()} to {end.isoformat()}")
    return keys


def run_windows(
    job: Target,
    keys: list[str],
    *,
    force: bool = False,
    verbosity: int = 1,
    say: Callable[[str], None] = print,
    **output: Any,
) -> Tally:
    """Claim each window of ``keys`` in turn and run the job under each claim won.

    Stops at the first window the job's pause refuses, and at the first that
    fails, raising ``WindowFailed`` (its claim is recorded failed, with the
    traceback, as always). ``CommandError`` from the job's command (a stop
    signal, a lost claim) propagates as it is. ``output`` (``stdout``,
    ``stderr``) goes to the job's command.
    """
    tally = Tally()
    for key in keys:
        claimed = claim_when_free(job, key, force, say if verbosity > 1 else None)
        if isinstance(claimed, Refusal):
            if claimed.reason == Reason.PAUSED:
                tally.paused = claimed
                return tally
            tally.skipped.append((key, claimed))
            continue
        try:
            named = {} if job.schedule is None else {"schedule_name": job.schedule}
            call_command(
                job.command,
                *job.args,
                **named,
                window_key=key,
                claim_token=str(claimed.token),
                verbosity=verbosity,
                skip_checks=True,
                **output,
            )
        except CommandError:
            raise
        except Exception as error:
            raise WindowFailed(key, error) from error
        tally.ran.append(key)
    return tally


def claim(job: Target, key: str, force: bool = False) -> JobRun | Refusal:
    """Claim ``key`` of ``job`` once, as a run by hand does: the admin's
    "Run now" takes a refusal as its answer instead of waiting."""
    return JobRun.objects.try_claim(
        job.name,
        key,
        lease=job.job.lease_for(None),
        force=force,
        allow_overlap=job.job.allow_overlap,
        schedule=job.slots.recorded_schedule,
    )


def claim_when_free(
    job: Target, key: str, force: bool, say: Callable[[str], None] | None
) -> JobRun | Refusal:
    """Claim ``key``, waiting while a run of another window holds the job."""
    look = 0.05
    while True:
        outcome = claim(job, key, force)
        if not isinstance(outcome, Refusal) or outcome.reason != Reason.OVERLAP:
            return outcome
        if say is not None:
            say(f"Waiting for {job.name} {key}: {outcome}")
        time.sleep(look)
        look = min(look * 2, LONGEST_LOOK)
