"""Claims selected by state and by job, and what operators do to them.

Every state is judged by the database's clock, through filters the
(status, expires_at) index serves.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias, TypedDict

from django.db import models
from django.db.models import Case, Count, F, Max, OuterRef, Q, Subquery, Sum, When
from django.db.models.functions import Coalesce

from jobclaims.claims import rule
from jobclaims.claims.rule import State, Status
from jobclaims.exceptions import UnknownClaim
from jobclaims.models.skips import JobSkip
from jobclaims.time.clock import DatabaseNow

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    from jobclaims.models import JobRun


class Skips(TypedDict):
    """What ``JobRunQuerySet.with_skips()`` annotates on each run."""

    skips: int
    last_skipped_at: datetime.datetime | None


class StateAnnotations(TypedDict):
    """What ``JobRunQuerySet.with_state()`` annotates on each run."""

    state: str
    db_now: datetime.datetime


class Listing(StateAnnotations, Skips):
    """What a listing of claims shows beside the row: its state and its skips."""


if TYPE_CHECKING:
    #: A run as the admin and jobclaims_status list it.
    ListedRun: TypeAlias = WithAnnotations["JobRun", Listing]


class JobRunQuerySet(models.QuerySet["JobRun"]):
    """Claims filtered by state, always judged by the database's clock.

    Each state selects its rows through filters the (status, expires_at)
    index serves, rather than by comparing the computed state: a filter on
    the CASE expression of ``with_state()`` would read every row.
    """

    def running(self) -> JobRunQuerySet:
        return self.filter(status=Status.RUNNING)

    def active(self) -> JobRunQuerySet:
        """Runs whose holder's lease has not run out."""
        return self.running().filter(expires_at__gt=DatabaseNow())

    def expired(self) -> JobRunQuerySet:
        """Runs still marked running whose lease ran out: their holder died."""
        return self.running().filter(expires_at__lte=DatabaseNow())

    def finished(self) -> JobRunQuerySet:
        return self.filter(
            status__in=[
                Status.SUCCEEDED,
                Status.FAILED,
                Status.TIMED_OUT,
                Status.CANCELLED,
            ]
        )

    def in_state(self, state: str) -> JobRunQuerySet:
        """Claims in ``state``, one of ``rule.State``."""
        filters: dict[str, Callable[[], JobRunQuerySet]] = {
            State.ACTIVE: self.active,
            State.EXPIRED: self.expired,
            State.SUCCEEDED: lambda: self.filter(status=Status.SUCCEEDED),
            State.FAILED: lambda: self.filter(status=Status.FAILED),
            State.RETRYING: lambda: self.filter(status=Status.RETRYING),
            State.TIMED_OUT: lambda: self.filter(status=Status.TIMED_OUT),
            State.CANCELLED: lambda: self.filter(status=Status.CANCELLED),
        }
        return filters[State(state)]()

    def due_retries(self) -> JobRunQuerySet:
        """Fires waiting for a retry whose time has come, by the database clock."""
        return self.filter(status=Status.RETRYING, retry_at__lte=DatabaseNow())

    def with_state(self) -> JobRunQuerySet:
        """Annotate ``state``, and ``db_now`` to measure the lease against."""
        return self.annotate(state=rule.state_expression(), db_now=DatabaseNow())

    def listing(self, *, state: str | None = None, job: str | None = None) -> JobRunQuerySet:
        """Claims with their state, newest first, optionally of one state or job."""
        runs = self if state is None else self.in_state(state)
        if job is not None:
            runs = runs.filter(job=job)
        return runs.with_state().order_by("-claimed_at", "-pk")

    def running_counts(self) -> dict[str, int]:
        """How many claims are active and how many expired, in one query.

        Only running rows are read, through the (status, expires_at) index, so
        the count stays cheap however many finished rows the table keeps.
        """
        now = DatabaseNow()
        return self.running().aggregate(
            **{
                State.ACTIVE.value: Count("pk", filter=Q(expires_at__gt=now)),
                State.EXPIRED.value: Count("pk", filter=Q(expires_at__lte=now)),
            }
        )

    def with_skips(self) -> JobRunQuerySet:
        """Annotate ``skips`` and ``last_skipped_at``: the instances that
        stepped aside for each run since it claimed its window.

        A reason's count covers the whole window: after a takeover it also
        holds the skips the earlier holder saw, once a skip follows it.
        """
        since_claim = JobSkip.objects.filter(
            job=OuterRef("job"),
            window=OuterRef("window"),
            skipped_at__gte=OuterRef("claimed_at"),
        ).values("job")
        return self.annotate(
            skips=Coalesce(
                Subquery(since_claim.annotate(n=Sum("count")).values("n")),
                0,
            ),
            last_skipped_at=Subquery(since_claim.annotate(last=Max("skipped_at")).values("last")),
        )

    def expire(self) -> int:
        """End the lease of running claims now, so the next instance takes over.

        Returns how many claims were expired.
        """
        return self.running().update(expires_at=DatabaseNow())

    def reopen(self) -> int:
        """Let the next instance run succeeded windows again, without --force.

        The claim engine takes over a failed window, so a reopened row is
        marked failed, with an error that says it was reopened by hand. Failed
        rows are open already and keep their traceback; running rows are left
        to ``expire()``. Returns how many windows were reopened.
        """
        return self.filter(status=Status.SUCCEEDED).update(
            status=Status.FAILED,
            error="Reopened by an operator: the next run takes this window over.",
        )

    def expire_held(self, job: str, window: str | None = None) -> int:
        """Expire ``job``'s active claims (of one ``window``), so that the
        job's next run takes them over; return how many.

        For a holder an operator knows is stuck, rather than waiting out its
        lease. Raises ``UnknownClaim``, naming what does exist, when the job
        or the window has never been claimed: nothing is changed then.
        """
        return self.claims_of(job, window).active().expire()

    def cancel(self, by: str) -> int:
        """End these runs that are running or waiting for a retry as
        cancelled by ``by``, now, by the database clock; return how many.

        One compare-and-set UPDATE. From its commit each run's fenced
        writes, renewals and outcome are refused (they need the row running
        under its token), and the run's process is told: by its scheduler,
        or by its heartbeat (``jobclaims.running.cancels``). A running run
        keeps its lease, and its hold on the job, until its process says it
        stopped or the lease runs out (it is no longer renewed): until then
        the window is not open to a rerun, which would overlap it. A fire
        waiting for its retry has no process: it lets go at once.
        """
        now = DatabaseNow()
        waiting = Q(status=Status.RETRYING)
        return self.filter(status__in=[Status.RUNNING, Status.RETRYING]).update(
            status=Status.CANCELLED,
            holds_job=Case(When(waiting, then=None), default=F("holds_job")),
            retry_at=None,
            expires_at=Case(When(waiting, then=now), default=F("expires_at")),
            finished_at=now,
            cancelled_at=now,
            cancelled_by=by,
            error=f"Cancelled by {by}.",
        )

    def claims_of(self, job: str, window: str | None = None) -> JobRunQuerySet:
        """``job``'s claims (of one ``window``), for an operator's command;
        a job's name takes in its several schedules' claims, as a pause of
        it holds for them (``jobclaims.claims.naming``).

        Raises ``UnknownClaim``, naming what does exist, when the job or the
        window has never been claimed: likely a typo.
        """
        runs = self.filter(Q(job=job) | Q(job__startswith=f"{job}[", job__endswith="]"))
        if not runs.exists():
            raise UnknownClaim(f"no claim of job {job!r} exists; {self._known_jobs()}")
        if window is not None:
            if not runs.filter(window=window).exists():
                raise UnknownClaim(
                    f"job {job!r} has no claim of window {window!r}; {runs._newest_windows()}"
                )
            runs = runs.filter(window=window)
        return runs

    def _known_jobs(self, shown: int = 5) -> str:
        names = self.order_by("job").values_list("job", flat=True).distinct()
        jobs = list(names[: shown + 1])
        if not jobs:
            return "no job has claimed anything yet"
        more = ", …" if len(jobs) > shown else ""
        return f"known jobs: {', '.join(jobs[:shown])}{more}"

    def _newest_windows(self, shown: int = 3) -> str:
        newest = self.order_by("-claimed_at", "-pk").values_list("window", flat=True)
        return f"its newest windows: {', '.join(newest[:shown])}"
