"""Errors a job can catch. Importable before Django's apps are ready."""

from __future__ import annotations

import datetime
import signal
from typing import TYPE_CHECKING

from django.db import DatabaseError

if TYPE_CHECKING:
    from jobclaims.claims.rule import Refusal


class ClaimLost(Exception):
    """This run no longer holds its claim: another instance took it over.

    Raised by ``JobRun.ensure_held()`` and on entering ``JobRun.fenced()``.
    The work must stop; whatever it would write now could overwrite the new
    holder's.
    """


class JobInterrupted(BaseException):
    """The process was asked to stop (SIGTERM or SIGINT) while a job ran.

    A ``BaseException``, like ``KeyboardInterrupt``, so that a job's own
    ``except Exception`` does not swallow the request to stop.
    """

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class JobTimedOut(BaseException):
    """The run reached its job's ``timeout``: the process stops it (``jobclaims.running.timeouts``).

    A ``BaseException`` for the reason ``JobInterrupted`` is one. The run
    is recorded timed out, however it ended once its timeout came.
    """

    def __init__(self, timeout: datetime.timedelta, how: str = ""):
        self.timeout = timeout
        #: How the run ended, when it did not end by this exception.
        self.how = how
        super().__init__(f"stopped at its timeout of {timeout}" + (f" ({how})" if how else ""))


class JobCancelled(BaseException):
    """An operator cancelled the run (``jobclaims.running.cancels``): the process stops it.

    A ``BaseException`` for the reason ``JobInterrupted`` is one. The row
    says cancelled already; nothing more is recorded.
    """

    def __init__(self, by: str, at: datetime.datetime | None):
        self.by, self.at = by, at
        when = f" at {at:%Y-%m-%d %H:%M:%S} UTC" if at else ""
        super().__init__(f"cancelled by {by}{when}")


class NotClaimed(Exception):
    """``jobclaims.claim()`` was refused: the block did not run.

    Another instance holds the window, the window already succeeded, or a
    run of another window still holds the job. Skipping is normal; catch it.
    """

    def __init__(self, job: str, window: str, refusal: Refusal | None = None):
        self.job, self.window = job, window
        #: Why, and the row that refused the claim (``jobclaims.claims.rule.Refusal``).
        self.refusal = refusal
        why = refusal or "it is held by another instance or already done"
        super().__init__(f"{job} {window} was not claimed: {why}")


class LeaseLapsed(NotClaimed):
    """A claim was taken, but the run could not know its lease was still its own.

    Its commit returned late (a cluster's stall, a synchronous standby, a
    lock, a paused process), leaving less than one renewal interval of the
    lease it knows of, and a renewal on its token did not give it one: the
    lease may have ended, and another instance may hold the window. The
    block did not run. A ``NotClaimed``, so code that steps aside from a
    refused claim steps aside from this one too.
    """

    def __init__(self, job: str, window: str, why: str):
        self.job, self.window, self.refusal = job, window, None
        Exception.__init__(self, f"{job} {window} did not start: {why}")


class PausedBeforeStart(LeaseLapsed):
    """The run's job was paused after its claim, before its run started.

    A run looks at its job's pauses right before it starts, so that from a
    pause's commit no run of the job starts, however long ago its claim
    was taken (a scheduler's child starting up, a jitter, a queued task).
    The claim was given back, recorded cancelled by whoever paused the
    job; the block did not run. A ``NotClaimed`` (through ``LeaseLapsed``)
    whose ``refusal`` names the pause, so code that steps aside from a
    paused job's refused claim steps aside from this one too.
    """

    def __init__(self, job: str, window: str, refusal: Refusal):
        super().__init__(job, window, f"{refusal.paused} after its claim; its claim is given back")
        self.refusal = refusal


class ClaimFailed(DatabaseError):
    """The claim could not be made: the database could not be reached, or
    kept asking for the claim to be tried again. Nothing ran.

    Raised by ``claim()``, ``@claimed`` and a ``ClaimedTask`` before the
    work starts, in place of the driver's error (its ``__cause__``), with
    one line that says what the database answered; a ``JobCommand`` exits 1
    with the same line. A ``DatabaseError``, so code that catches those
    still catches it. Nothing was claimed: the next run tries again.
    """


class StandbyTimeout(Exception):
    """A claim's commit was not acknowledged by a synchronous standby in time.

    With synchronous replication, PostgreSQL waits for a standby before it
    reports a commit, and with no standby answering it would wait forever.
    jobclaims cancels the wait after ``JOBCLAIMS["STANDBY_TIMEOUT"]``; the
    commit then stands on the primary alone, which a failover would lose,
    so the job does not run. Raised by ``JobRun.objects.claim()``.
    """


class UnknownClaim(LookupError):
    """The job or the window named has no claim: likely a typo.

    Raised by ``JobRun.objects.expire_held()``.
    """


class EditConflict(ValueError):
    """A stored schedule's edit was made from a version it no longer has:
    another edit, or its deletion, came first. Nothing was changed.

    Raised by ``change_schedule()`` and ``delete_schedule()`` given the
    ``version`` the edit was made from, naming who changed it.
    """


class UnknownJob(LookupError):
    """No job of that name is defined or recorded: likely a typo.

    Raised by ``jobclaims.controls.pauses`` and ``jobclaims.controls.backfills``, naming the
    jobs that exist.
    """
