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

import contextlib
import datetime
import functools
import itertools
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError

from jobclaims.claims import naming
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import JobInterrupted, UnknownJob
from jobclaims.jobs import discovery
from jobclaims.jobs.commands import JobCommand, run_key, schedule_for_run, slots_of
from jobclaims.jobs.schedules import JobSchedule, entries
from jobclaims.models import JobRun
from jobclaims.running.stopping import STOP_SIGNALS
from jobclaims.time.clock import database_now
from jobclaims.time.slots import Slots

#: The longest a window held up by a run of another window waits between looks.
LONGEST_LOOK = 1.0
#: A range of more windows is refused unless the operator allows more
#: (``jobclaims_run --max-windows``): a typo in a date, or a window of a
#: second, would otherwise start hours of runs.
MAX_WINDOWS = 1000
#: How often, in seconds, a long range tells how far it has come.
PROGRESS_EVERY = 10.0


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
        return job if self.schedule is None else naming.claim_name(job, self.schedule)

    @functools.cached_property
    def scheduled(self) -> JobSchedule | None:
        """The job's (or the schedule's) schedule, if it has one, or
        ``CommandError`` naming the fix."""
        return schedule_for_run(self.job, self.schedule)

    @functools.cached_property
    def slots(self) -> Slots:
        """How the job's (or the schedule's) time is cut, or ``CommandError`` naming the fix."""
        return slots_of(self.job, self.scheduled)


@dataclass
class Tally:
    """What a run by hand did with each window it was given."""

    ran: list[str] = field(default_factory=list)
    skipped: list[tuple[str, Refusal]] = field(default_factory=list)
    #: The pause that stopped the run, if one did.
    paused: Refusal | None = None
    #: What else stopped it before its last window: ``WindowFailed``, the
    #: job's ``CommandError`` (a stop signal, a lost claim), or
    #: ``JobInterrupted`` for a stop signal between two windows.
    stopped: BaseException | None = None

    @property
    def done_before(self) -> list[str]:
        """The windows that had succeeded already (``--force`` runs them again)."""
        return [key for key, refusal in self.skipped if _succeeded(refusal)]

    @property
    def held(self) -> list[str]:
        """The windows another run held, or was running."""
        return [key for key, refusal in self.skipped if not _succeeded(refusal)]


def _succeeded(refusal: Refusal) -> bool:
    """Whether ``refusal`` is of a window done already: its own, or one over the same time."""
    return refusal.reason == Reason.SUCCEEDED or (
        refusal.reason == Reason.SLOT_RAN and refusal.status == JobRun.Status.SUCCEEDED
    )


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
    return [Target(name, command) for name, command in discovery.job_commands().items()]


def current_key(job: Target) -> str:
    """The key of the job's current window, or of its latest fire due."""
    return run_key(job.name, job.slots, None)


class WindowFailed(Exception):
    """The job raised in one window of a run by hand: the later ones were not run."""

    def __init__(self, key: str, error: Exception):
        super().__init__(f"{key}: {error!s:.200}")
        self.key = key


class TooManyWindows(ValueError):
    """A range of more windows than the bound it was given: none was run.

    ``through`` is a moment of the last window within the bound, ``rest``
    one of the window after it: the end of the range's first part and the
    start of the rest, for the message that says how to run them.
    """

    def __init__(self, limit: int, through: datetime.datetime, rest: datetime.datetime):
        super().__init__(f"the range has more than {limit} windows")
        self.limit, self.through, self.rest = limit, through, rest


def keys_between(
    job: Target,
    start: datetime.datetime,
    end: datetime.datetime | None = None,
    *,
    limit: int = MAX_WINDOWS,
) -> list[str]:
    """Keys of the job's windows (or fires) from ``start`` to ``end`` (by
    default now), both included, oldest first.

    Raises ``ValueError`` naming the fix for an empty or reversed range, or
    one that begins or ends after now by the database clock: a window that
    has not come yet cannot be run early, and its own run would then be
    skipped. Raises ``TooManyWindows`` for more than ``limit`` windows,
    having read only one more: a range of a million one-second windows
    takes hours to run, and seconds to list.
    """
    now = database_now(jobclaims_settings.claims_database(JobRun))
    if end is None and start > now:
        raise ValueError(
            f"--from {start.isoformat()} has not come yet by the database clock; "
            "give a --from in the past"
        )
    end = now if end is None else end
    if end < start:
        raise ValueError(f"--to {end.isoformat()} is before --from {start.isoformat()}")
    if end > now:
        raise ValueError(
            f"--to {end.isoformat()} has not come yet by the database clock; "
            "leave --to out to end the range now"
        )
    read = list(itertools.islice(job.slots.through(start, end), limit + 1))
    if not read:
        raise ValueError(f"{job.name} has no fire from {start.isoformat()} to {end.isoformat()}")
    if len(read) > limit:
        raise TooManyWindows(limit, read[limit - 1][0], read[limit][0])
    return [key for _moment, key in read]


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

    Stops at the first window the job's pause refuses, at the first that
    fails (``Tally.stopped`` is a ``WindowFailed``; its claim is recorded
    failed, with the traceback, as always), at a ``CommandError`` of the
    job's command (a stop signal, a lost claim), and at a stop signal
    between two windows (a ``JobInterrupted``): whatever stopped it, the
    tally says what was done. ``output`` (``stdout``, ``stderr``) goes to
    the job's command; at verbosity 1 and above, ``say`` tells the progress
    of a long range every ``PROGRESS_EVERY`` seconds.
    """
    tally = Tally()
    started = last_said = time.monotonic()
    with _stop_signals_between_windows() as stop:
        for done, key in enumerate(keys):
            if stop.signum is not None:
                tally.stopped = JobInterrupted(stop.signum)
                return tally
            claimed = claim_when_free(job, key, force, say if verbosity > 1 else None, stop)
            if claimed is None:
                continue  # A stop signal came while it waited: the loop's next look says so.
            if isinstance(claimed, Refusal):
                if claimed.reason == Reason.PAUSED:
                    tally.paused = claimed
                    return tally
                tally.skipped.append((key, claimed))
            else:
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
                except CommandError as error:
                    tally.stopped = error
                    return tally
                except Exception as error:
                    tally.stopped = WindowFailed(key, error)
                    return tally
                tally.ran.append(key)
            now = time.monotonic()
            if verbosity and now - last_said >= PROGRESS_EVERY and done + 1 < len(keys):
                say(_progress(job, done + 1, len(keys), now - started))
                last_said = now
        if stop.signum is not None and len(tally.ran) + len(tally.skipped) < len(keys):
            tally.stopped = JobInterrupted(stop.signum)
    return tally


def _progress(job: Target, done: int, total: int, elapsed: float) -> str:
    """How far a long range has come, and how long the rest may take at its pace so far."""
    left = datetime.timedelta(seconds=round(elapsed / done * (total - done)))
    return (
        f"{job.name}: {done} of {total} windows done in "
        f"{datetime.timedelta(seconds=round(elapsed))}, about {left} to go."
    )


class _StopSignal:
    """The stop signal a range received between two windows, if one came."""

    signum: int | None = None


@contextlib.contextmanager
def _stop_signals_between_windows() -> Iterator[_StopSignal]:
    """Note SIGTERM and SIGINT between two windows, so the range stops there.

    While a window runs, the job's command turns them into ``JobInterrupted``
    as always (its claim is recorded interrupted), then gives this handler
    back. Between windows, a claim is not cut in the middle: the range stops
    before its next window and says what it did. Only the main thread can
    set handlers; elsewhere, the process's own handling applies.
    """
    stop = _StopSignal()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def note(signum: int, frame: object) -> None:
        stop.signum = stop.signum or signum

    previous = {signum: signal.signal(signum, note) for signum in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


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
        series=None if job.scheduled is None else job.scheduled.series,
    )


def claim_when_free(
    job: Target,
    key: str,
    force: bool,
    say: Callable[[str], None] | None,
    stop: _StopSignal | None = None,
) -> JobRun | Refusal | None:
    """Claim ``key``, waiting while a run of another window holds the job;
    None if a stop signal came while it waited."""
    look = 0.05
    while True:
        outcome = claim(job, key, force)
        if not isinstance(outcome, Refusal) or outcome.reason != Reason.OVERLAP:
            return outcome
        if say is not None:
            say(f"Waiting for {job.name} {key}: {outcome}")
        time.sleep(look)
        if stop is not None and stop.signum is not None:
            return None
        look = min(look * 2, LONGEST_LOOK)
