"""What a claim row's state lets the next instance do, in Python and in SQL.

The table stores a status (running, succeeded, failed); whether a running
claim is still held depends on the moment it is looked at, by the database's
clock. A claim judges the rows it read in Python (``frees``) and writes with
compare-and-set statements that restate the same rule in SQL (``frees_q``),
so a row that changed in between is left alone: the two are written here
side by side, and one test holds them together over every state.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.db import models
from django.db.models import Case, Q, Value, When
from django.utils.translation import gettext_lazy as _

from jobclaims.claims import naming
from jobclaims.time.clock import DatabaseNow


class Status(models.TextChoices):
    """What a claim row stores: ``JobRun.Status``."""

    RUNNING = "running", _("running")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    #: Failed or interrupted under a scheduler; the next attempt is due at
    #: ``retry_at`` (``jobclaims.running.attempts``).
    RETRYING = "retrying", _("retrying")
    #: Stopped at the job's ``timeout``; counted as a failure (``jobclaims.running.timeouts``).
    TIMED_OUT = "timed-out", _("timed out")
    #: Cancelled by an operator while it ran (``jobclaims.running.cancels``).
    CANCELLED = "cancelled", _("cancelled")


class State(models.TextChoices):
    """What an operator sees: a running claim is active or expired."""

    ACTIVE = "active", _("active")
    EXPIRED = "expired", _("expired")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    RETRYING = "retrying", _("retrying")
    TIMED_OUT = "timed-out", _("timed out")
    CANCELLED = "cancelled", _("cancelled")


class Reason(models.TextChoices):
    """Why an instance stepped aside: ``JobSkip.Reason``."""

    HELD = "held", _("another instance held the window")
    SUCCEEDED = "succeeded", _("the window had already succeeded")
    OVERLAP = "overlap", _("a run of another window held the job")
    #: A scheduler's look at a fire that failed: only its retry policy runs it again.
    FAILED = "failed", _("the fire failed, and its retries are the scheduler's")
    SLOT_RAN = "slot-ran", _("another window covering the same time had run")
    PAUSED = "paused", _("an operator had paused the job")


@dataclass(frozen=True)
class PauseNote:
    """The pause that refused a claim: who paused the job, when, why, until when."""

    by: str
    at: datetime.datetime
    reason: str = ""
    #: None: until an operator resumes it.
    until: datetime.datetime | None = None
    #: The job the pause is of: the claim's, the job a schedule's claim
    #: belongs to, or ``naming.ALL_JOBS``.
    job: str = ""

    @property
    def of_all_jobs(self) -> bool:
        """Whether this is the pause of all jobs, which resuming one job leaves in force."""
        return self.job == naming.ALL_JOBS

    def __str__(self) -> str:
        said = f"paused by {self.by} at {_utc(self.at)}"
        if self.of_all_jobs:
            said = f"all jobs {said}"
        if self.until is not None:
            said += f" until {_utc(self.until)}"
        return f"{said} ({self.reason})" if self.reason else said


@dataclass(frozen=True)
class Refusal:
    """Why a claim was refused, and the row that refused it.

    The row is described as the claim's own read found it, so saying why
    costs no statement. Its fields are None when the claim lost a race for
    a row it never saw committed: another instance inserted or took it over
    a moment before.
    """

    job: str
    window: str
    reason: Reason
    #: The refusing row's window: ``window``, or another window's for an overlap.
    held_window: str | None = None
    #: The refusing row's job, when another name of the claim's schedule
    #: claimed the same fire (``jobclaims.claims.naming``); None: the claim's own.
    held_job: str | None = None
    #: Who holds the refusing row (or last held it, for a finished run).
    owner: str | None = None
    status: str | None = None
    expires_at: datetime.datetime | None = None
    finished_at: datetime.datetime | None = None
    #: The pause in force, for a refusal of a paused job.
    paused: PauseNote | None = None

    def __str__(self) -> str:
        if self.paused is not None:
            return str(self.paused)
        if self.owner is None:  # The claim did not read the row (or saw it uncommitted).
            return {
                Reason.HELD: "another instance holds it",
                Reason.SUCCEEDED: "it already succeeded",
                Reason.OVERLAP: "a run of another window holds the job",
                Reason.FAILED: "it failed, and its retries are the scheduler's",
                Reason.SLOT_RAN: "another window covering the same time has run",
                Reason.PAUSED: "an operator paused the job",
            }[self.reason]
        if self.reason == Reason.SLOT_RAN and self.held_job is not None:
            return f"its schedule claimed this fire as {self.held_job}, whose run is {self.status}"
        if self.reason == Reason.SLOT_RAN:
            return (
                f"the {self.held_window} run covers the same time and is "
                f"{'still running' if self.status == Status.RUNNING else 'done'}"
            )
        if self.reason == Reason.OVERLAP:
            return (
                f"the {self.held_window} run, held by {self.owner} until "
                f"{_utc(self.expires_at)}, is still running"
            )
        if self.reason == Reason.SUCCEEDED:
            return f"it already succeeded at {_utc(self.finished_at)}"
        if self.reason == Reason.FAILED:
            return f"it {self.status} at {_utc(self.finished_at)}; its retries are the scheduler's"
        return f"held by {self.owner} until {_utc(self.expires_at)}"

    def pause(
        self, now: datetime.datetime, deadline: datetime.datetime
    ) -> datetime.timedelta | None:
        """How long a claim that may wait until ``deadline`` waits before it
        tries again, judged at the database time ``now``; ``None``: give up.

        It gives up when the window succeeded or the job is paused (no lease
        ends a pause), or when the lease in the way ends after ``deadline``
        (a live holder renews its lease). A row it did not see committed is
        tried again at once.
        """
        if self.reason in (Reason.SUCCEEDED, Reason.PAUSED):
            return None
        ends = self.expires_at or now
        if ends > deadline:
            return None
        return max(ends - now, datetime.timedelta()) + AFTER_THE_LEASE

    def fields(self) -> dict[str, object]:
        """The refusal as structured log fields."""
        fields: dict[str, object] = {
            "reason": self.reason.value,
            "held_window": self.held_window,
            "holder": self.owner,
            "held_until": self.expires_at,
        }
        if self.paused is not None:
            fields.update(paused_by=self.paused.by, paused_until=self.paused.until)
        return fields


#: A waiting claim comes back this long after the lease in its way ends, so
#: the database's clock has passed that end when it tries again.
AFTER_THE_LEASE = datetime.timedelta(milliseconds=200)


def _utc(moment: datetime.datetime | None) -> str:
    return "?" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


#: What each state means, in words an operator reads next to its badge.
MEANINGS = {
    State.ACTIVE: _("Running; its holder's lease has not run out."),
    State.EXPIRED: _("Still marked running, but its lease ran out: its holder died."),
    State.SUCCEEDED: _("Finished and succeeded."),
    State.FAILED: _("Finished and failed; the next run takes this window over."),
    State.RETRYING: _("Failed or interrupted; a scheduler runs it again when its retry is due."),
    State.TIMED_OUT: _("Stopped at its timeout, a failure; the next run takes this window over."),
    State.CANCELLED: _(
        "Cancelled by an operator while it ran; once its process stopped, a rerun of the "
        "window may take it."
    ),
}


def state_expression() -> Case:
    """The state of each row, as SQL evaluated with the database's clock."""
    running = Q(status=Status.RUNNING)
    held = running & Q(expires_at__gt=DatabaseNow())
    return Case(
        When(held, then=Value(State.ACTIVE.value)),
        When(running, then=Value(State.EXPIRED.value)),
        When(status=Status.SUCCEEDED, then=Value(State.SUCCEEDED.value)),
        When(status=Status.RETRYING, then=Value(State.RETRYING.value)),
        When(status=Status.TIMED_OUT, then=Value(State.TIMED_OUT.value)),
        When(status=Status.CANCELLED, then=Value(State.CANCELLED.value)),
        default=Value(State.FAILED.value),
        output_field=models.CharField(),
    )


#: The finished statuses that let the next claim in without ``force``.
_OPEN = (Status.FAILED, Status.RETRYING, Status.TIMED_OUT)


def may_take_over(status: str, lapsed: bool, force: bool, take_failed: bool = True) -> bool:
    """Whether a window's row may go to the next instance of its job.

    It failed (or waits for a retry), its holder died (still running, its
    lease run out), it was cancelled and its run let go of it, or it
    succeeded and ``force`` asks to run it again. Without ``take_failed`` a
    failed, retrying or cancelled row stays as it is: a scheduler's look at
    a fire leaves its retries to the job's retry policy
    (``jobclaims.running.attempts``), however many hosts look.

    A cancelled window is open like a failed one, but only once its lease
    ended: the cancel leaves the lease as it was, and the run's process
    ends it when it stops (``jobclaims.running.cancels``). The operator
    stopped that run, not the window, and two runs of one window must never
    overlap (pause the job to keep its next runs from starting).
    """
    if status == Status.RUNNING:
        return lapsed
    if status == Status.CANCELLED:
        return take_failed and lapsed
    if status in _OPEN:
        return take_failed
    return force and status == Status.SUCCEEDED


def may_take_over_q(force: bool, take_failed: bool = True) -> Q:
    """``may_take_over``, as a condition on rows."""
    lapsed = Q(expires_at__lte=DatabaseNow())
    open_ = Q(status=Status.RUNNING) & lapsed
    if take_failed:
        open_ |= Q(status__in=_OPEN) | (Q(status=Status.CANCELLED) & lapsed)
    if force:
        open_ |= Q(status=Status.SUCCEEDED)
    return open_


def frees(
    row_window: str,
    status: str,
    lapsed: bool,
    window: str,
    force: bool,
    take_failed: bool = True,
) -> bool:
    """Whether a row read in the way of a claim of ``window`` lets it through.

    The window's own row does if it may be taken over; a run of another
    window that holds the job does once its lease ran out.
    """
    if row_window != window:
        return lapsed
    return may_take_over(status, lapsed, force, take_failed)


def frees_q(window: str, force: bool, take_failed: bool = True) -> Q:
    """``frees``, as a condition on rows."""
    same_window = Q(window=window)
    lapsed = Q(expires_at__lte=DatabaseNow())
    return (same_window & may_take_over_q(force, take_failed)) | (~same_window & lapsed)
