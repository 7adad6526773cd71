"""The claim a run of a job holds on its window, and the runs that stepped aside.

What a row is lives here; how a claim is decided lives in
``jobclaims.claims``: the rule for when a row may be taken over, the engine
that takes it, and each database's statements.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypeAlias, TypedDict, TypeVar, cast

from django.db import models
from django.db.models import Count, Max, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_lazy as _

from jobclaims import leases, schedule_names, slots
from jobclaims.claims import rule, validation
from jobclaims.claims.engine import Claim, Takeover, process_owner
from jobclaims.claims.rule import Refusal, State
from jobclaims.clock import DatabaseNow
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import UnknownClaim

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


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
        return self.filter(status=JobRun.Status.RUNNING)

    def active(self) -> JobRunQuerySet:
        """Runs whose holder's lease has not run out."""
        return self.running().filter(expires_at__gt=DatabaseNow())

    def expired(self) -> JobRunQuerySet:
        """Runs still marked running whose lease ran out: their holder died."""
        return self.running().filter(expires_at__lte=DatabaseNow())

    def finished(self) -> JobRunQuerySet:
        return self.filter(
            status__in=[
                JobRun.Status.SUCCEEDED,
                JobRun.Status.FAILED,
                JobRun.Status.TIMED_OUT,
                JobRun.Status.CANCELLED,
            ]
        )

    def in_state(self, state: str) -> JobRunQuerySet:
        """Claims in ``state``, one of ``rule.State``."""
        filters: dict[str, Callable[[], JobRunQuerySet]] = {
            State.ACTIVE: self.active,
            State.EXPIRED: self.expired,
            State.SUCCEEDED: lambda: self.filter(status=JobRun.Status.SUCCEEDED),
            State.FAILED: lambda: self.filter(status=JobRun.Status.FAILED),
            State.RETRYING: lambda: self.filter(status=JobRun.Status.RETRYING),
            State.TIMED_OUT: lambda: self.filter(status=JobRun.Status.TIMED_OUT),
            State.CANCELLED: lambda: self.filter(status=JobRun.Status.CANCELLED),
        }
        return filters[State(state)]()

    def due_retries(self) -> JobRunQuerySet:
        """Fires waiting for a retry whose time has come, by the database clock."""
        return self.filter(status=JobRun.Status.RETRYING, retry_at__lte=DatabaseNow())

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
        return self.filter(status=JobRun.Status.SUCCEEDED).update(
            status=JobRun.Status.FAILED,
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
        under its token), the window no longer holds the job, and the run's
        process is told: by its scheduler, or by its heartbeat
        (``jobclaims.cancels``).
        """
        now = DatabaseNow()
        return self.filter(status__in=[JobRun.Status.RUNNING, JobRun.Status.RETRYING]).update(
            status=JobRun.Status.CANCELLED,
            holds_job=None,
            retry_at=None,
            expires_at=now,
            finished_at=now,
            cancelled_at=now,
            cancelled_by=by,
            error=f"Cancelled by {by}.",
        )

    def claims_of(self, job: str, window: str | None = None) -> JobRunQuerySet:
        """``job``'s claims (of one ``window``), for an operator's command.

        Raises ``UnknownClaim``, naming what does exist, when the job or the
        window has never been claimed: likely a typo.
        """
        runs = self.filter(job=job)
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


_M = TypeVar("_M", bound=models.Model)
_T = TypeVar("_T")


class ClaimsDatabaseManager(models.Manager[_M]):
    """Reads and writes in the claims database, unless told otherwise.

    The claims database is ``JOBCLAIMS["DATABASE"]``, else the router's
    choice for writes: a claim read from a lagging replica could let a
    second instance in, or miss a job only the primary has seen.
    ``using()`` and ``db_manager()`` still choose another.
    """

    def get_queryset(self) -> models.QuerySet[_M]:
        return super().get_queryset().using(self.claims_db())

    def claims_db(self) -> str:
        """The alias this manager reads and writes: the claims database, or
        the one ``db_manager()`` chose."""
        return self._db or jobclaims_settings.claims_database(self.model)


# Bound to a name first: django-stubs builds the manager's typed methods only
# from a from_queryset() call assigned at module level.
_JobRunManagerBase = ClaimsDatabaseManager.from_queryset(JobRunQuerySet)


class JobRunManager(_JobRunManagerBase["JobRun"]):
    """The queryset's filters, and the claim: ``claim()`` and ``try_claim()``."""

    def claim(
        self,
        job: str,
        window: str,
        *,
        lease: datetime.timedelta,
        force: bool = False,
        allow_overlap: bool = False,
        schedule: str = "",
    ) -> JobRun | None:
        """Claim ``window`` of ``job`` for this process, or return ``None``.

        ``None`` means another holder's lease has not run out, the window
        already succeeded (pass ``force=True`` to run it again), unless
        ``allow_overlap`` a run of another window of the job still holds it,
        or a run of another window covering the same time succeeded or is
        held (``jobclaims.slots``); ``try_claim()`` says which. ``schedule``
        names how the job's windows are cut ("hourly", see
        ``jobclaims.windows``), so that windows no instance claimed can be
        listed later, and each window's slot known.

        Claim outside any transaction, and run the job after this returns: a
        claim that has not committed is invisible to the other instances.
        """
        outcome = self.try_claim(
            job, window, lease=lease, force=force, allow_overlap=allow_overlap, schedule=schedule
        )
        return None if isinstance(outcome, Refusal) else outcome

    def try_claim(
        self,
        job: str,
        window: str,
        *,
        lease: datetime.timedelta,
        force: bool = False,
        allow_overlap: bool = False,
        schedule: str = "",
        details: bool = True,
        owner: str | None = None,
        take_failed: bool = True,
    ) -> JobRun | Refusal:
        """``claim()``, returning the ``Refusal`` instead of ``None``: why the
        claim was refused, and the row that refused it (its holder, its
        state, its lease end), read by the statements the claim sent.

        ``details=False`` asks only why: on PostgreSQL and MariaDB a refused
        claim then costs two statements, not three (the skip's INSERT also
        reads the row in the way), and the refusal may leave the row's
        fields ``None``. For a caller that says nothing about a refusal,
        such as the scheduler of a host that lost a fire.

        ``owner`` names the holder in the admin and in refusals; by default
        this process (``host:pid:random-id``). A task runner can add the
        task's id, to find the window again when the task is redelivered.

        ``take_failed=False`` leaves a failed or retrying window alone, for
        a scheduler's look at a fire, whose retries follow the job's policy.
        """
        owner = owner or process_owner()
        self.model.validate_claim(job, window, lease, schedule, owner)
        slot_start, slot_end = slots.bounds(schedule, window) or (None, None)
        new = self.model(
            job=job,
            window=window,
            schedule=schedule,
            owner=owner,
            holds_job=None if allow_overlap else True,
            slot_start=slot_start,
            slot_end=slot_end,
        )
        pauses = JobPause.objects.db_manager(self.claims_db())
        # A database jobclaims has no SQL for is refused before any statement.
        outcome = Claim(
            new,
            self.claims_db(),
            lease=lease,
            rule=Takeover(force, take_failed),
            details=details,
            # A paused job starts no run, however it was started (jobclaims.pauses).
            paused=lambda: pauses.refusal(job, window),
        ).take()
        # The claim hands back the row it was given or read from this table.
        return outcome if isinstance(outcome, Refusal) else cast("JobRun", outcome)


class JobRun(models.Model):
    """One window of one job, and who holds it until when.

    The row for ``(job, window)`` is created by the window's first claim and
    reused by every takeover, so ``attempt`` counts the holders it had.
    """

    Status = rule.Status

    job = models.CharField(_("job"), max_length=200)
    window = models.CharField(_("window"), max_length=64)
    schedule = models.CharField(
        _("schedule"),
        max_length=32,
        blank=True,
        help_text=_("How the job's windows are cut, e.g. hourly; empty if unknown."),
    )
    status = models.CharField(_("status"), max_length=16, choices=Status, default=Status.RUNNING)
    owner = models.CharField(
        _("owner"),
        max_length=255,
        help_text=_("Host, process id and a random per-process id of the holder."),
    )
    token = models.UUIDField(
        _("token"),
        default=uuid.uuid4,
        help_text=_("Changes on every claim and takeover."),
    )
    attempt = models.PositiveIntegerField(_("attempt"), default=1)
    failures = models.PositiveIntegerField(
        _("failures"),
        default=0,
        help_text=_("Attempts that failed under a scheduler, counted against the job's retries."),
    )
    retry_at = models.DateTimeField(
        _("retry at"),
        null=True,
        blank=True,
        help_text=_("When a scheduler may run a retrying fire again."),
    )
    # True while this run keeps the job's other windows from starting, NULL
    # otherwise. NULLs never collide in a unique index on any database, so a
    # unique (job, holds_job) allows one holder per job without the partial
    # index that MariaDB lacks.
    holds_job = models.BooleanField(
        _("holds the job"),
        null=True,
        editable=False,
        help_text=_("Set while this run keeps other windows of its job waiting."),
    )
    # The interval the window covers (jobclaims.slots): a claim is refused
    # while another window of the job whose slot overlaps it succeeded or is
    # held. NULL for a claim with no schedule name, which is not compared.
    slot_start = models.DateTimeField(_("slot start"), null=True, blank=True, editable=False)
    slot_end = models.DateTimeField(_("slot end"), null=True, blank=True, editable=False)
    # db_default makes Django read these back with RETURNING after an INSERT
    # that sets them from the database clock.
    claimed_at = models.DateTimeField(_("claimed at"), db_default=DatabaseNow())
    expires_at = models.DateTimeField(_("expires at"), db_default=DatabaseNow())
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True)
    # db_default: the claim's own INSERT (jobclaims.claims.statements) names only its
    # columns; default: the claimed instance has the value, not an expression.
    cancelled_by = models.CharField(
        _("cancelled by"),
        max_length=150,
        blank=True,
        default="",
        db_default="",
        help_text=_("The OS user of the command, or the admin user, that cancelled the run."),
    )
    cancelled_at = models.DateTimeField(_("cancelled at"), null=True, blank=True)

    objects = JobRunManager()

    #: Until when, on ``leases.clock()``, this process knows its lease is
    #: held: set by the claim and each renewal, measured from before its
    #: statement was sent. None for a row this process only read.
    held_until: float | None = None

    class Meta:
        verbose_name = _("job run")
        verbose_name_plural = _("job runs")
        get_latest_by = "claimed_at"
        constraints = [
            models.UniqueConstraint(
                fields=["job", "window"], name="jobclaims_jobrun_job_window_uniq"
            ),
            models.UniqueConstraint(
                fields=["job", "holds_job"], name="jobclaims_jobrun_one_holder_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "expires_at"], name="jobclaims_status_expires_idx"),
            models.Index(fields=["claimed_at"], name="jobclaims_claimed_at_idx"),
            models.Index(fields=["job", "slot_end"], name="jobclaims_job_slot_end_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job} {self.window}"

    @classmethod
    def validate_claim(
        cls,
        job: str,
        window: str,
        lease: datetime.timedelta,
        schedule: str = "",
        owner: str = "",
    ) -> None:
        """Refuse a claim that the table could not store, naming the fix
        (``jobclaims.claims.validation``); every claim checks this first."""
        validation.validate(cls, JobSkip, job, window, lease, schedule, owner)

    def release(self, status: str = Status.SUCCEEDED, error: str = "") -> bool:
        """Record how the run ended and let the job's next run in.

        Returns ``False``, and writes nothing, when this claim is no longer
        ours: another instance took it over after our lease ran out. A
        moment's fault is tried again until the outcome is recorded or the
        lease is gone (``Claim.release()``); then the last error is raised.
        """
        if status not in (self.Status.SUCCEEDED, self.Status.FAILED, self.Status.TIMED_OUT):
            raise ValueError(f"release() takes succeeded, failed or timed-out, not {status!r}")
        return Claim(self).release(status, error)

    def renew(self, lease: datetime.timedelta, *, until: datetime.datetime | None = None) -> bool:
        """Extend the lease to ``lease`` from now, by the database clock, but
        not past ``until``; ``False`` once the lease has ended or the claim is
        no longer held (``Claim.renew()``)."""
        return Claim(self).renew(lease, until)

    def held_for(self) -> float:
        """Seconds of its lease this process knows are left, by ``held_until``."""
        return leases.held_for(self.held_until)

    def ensure_held(self) -> None:
        """Raise ``ClaimLost`` unless this run still holds its claim.

        Call it between steps of a long job: one indexed read.
        """
        Claim(self).ensure_held()

    def fenced(self) -> AbstractContextManager[None]:
        """A transaction whose writes commit only while the claim is held
        (``Claim.fenced()``). Keep the block short: while it is open, the
        next instance cannot take the window over. Raises ``ClaimLost`` on
        entry, writing nothing, if the claim was lost."""
        return Claim(self).fenced()


class JobSkip(models.Model):
    """Instances that stepped aside for one window of a job, for one reason.

    One row per job, window and reason, however many instances stepped
    aside: each skip adds one to ``count`` and leaves its owner and time as
    the last. Two beats sending a task every second would otherwise add a
    row per duplicate, 150,000 a day (docs/performance.md). Skips have a
    table of their own, written with one statement that never touches a
    claim row, so recording a skip never slows the holder.
    """

    Reason = rule.Reason

    job = models.CharField(_("job"), max_length=200)
    window = models.CharField(_("window"), max_length=64)
    owner = models.CharField(_("last skipped by"), max_length=255)
    reason = models.CharField(_("reason"), max_length=16, choices=Reason)
    count = models.PositiveIntegerField(_("times skipped"), default=1)
    skipped_at = models.DateTimeField(_("last skipped at"), db_default=DatabaseNow())

    objects = ClaimsDatabaseManager["JobSkip"]()

    class Meta:
        verbose_name = _("job skip")
        verbose_name_plural = _("job skips")
        constraints = [
            models.UniqueConstraint(
                fields=["job", "window", "reason"], name="jobclaims_skip_window_reason_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["job", "window", "skipped_at"], name="jobclaims_skip_window_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job} {self.window} skipped {self.count} times, last by {self.owner}"


class SchedulerSeen(models.Model):
    """A scheduler process that was alive, and the schedules it ran.

    Each ``jobclaims_scheduler`` writes its row as it starts and again at
    most every ``jobclaims.seen.SEEN_EVERY``, so that health can tell "no
    scheduler runs" and "two hosts run different schedules" (a half-rolled
    deploy) from the rows of the live ones.
    """

    host = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("process id"))
    fingerprint = models.CharField(
        _("fingerprint"),
        max_length=16,
        help_text=_("A digest of the schedules the scheduler runs: equal on hosts that agree."),
    )
    schedules = models.JSONField(
        _("schedules"), default=dict, help_text=_("Each job's schedule, by job name.")
    )
    started_at = models.DateTimeField(_("started at"), db_default=DatabaseNow())
    last_seen_at = models.DateTimeField(_("last seen at"), db_default=DatabaseNow())

    objects = ClaimsDatabaseManager["SchedulerSeen"]()

    class Meta:
        verbose_name = _("scheduler seen")
        verbose_name_plural = _("schedulers seen")
        constraints = [
            models.UniqueConstraint(
                fields=["host", "pid", "started_at"], name="jobclaims_scheduler_seen_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["last_seen_at"], name="jobclaims_seen_last_seen_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"


class JobPauseQuerySet(models.QuerySet["JobPause"]):
    """Pauses, judged by the database's clock like claims are."""

    def in_force(self) -> JobPauseQuerySet:
        """Pauses not resumed, whose ``until`` (if any) has not come yet."""
        return self.filter(resumed_at__isnull=True).filter(
            Q(until__isnull=True) | Q(until__gt=DatabaseNow())
        )

    def refusal(self, job: str, window: str) -> Refusal | None:
        """The refusal of a claim of ``job``'s ``window`` while ``job`` is
        paused, naming the newest pause in force; ``None`` if it is not.
        A pause of a job holds for each of its schedules too
        (``jobclaims.schedule_names``).

        One read through the (job, resumed_at) index.
        """
        jobs = [job, *filter(None, [schedule_names.parent(job)])]
        pause = self.in_force().filter(job__in=jobs).order_by("-paused_at", "-pk").first()
        if pause is None:
            return None
        note = rule.PauseNote(pause.paused_by, pause.paused_at, pause.reason, pause.until)
        return Refusal(job, window, rule.Reason.PAUSED, paused=note)


_JobPauseManagerBase = ClaimsDatabaseManager.from_queryset(JobPauseQuerySet)


class JobPauseManager(_JobPauseManagerBase["JobPause"]):
    """Pauses, read and written in the claims database."""


class JobPause(models.Model):
    """An operator's order that a job start no run: who gave it, when, why and until when.

    Every claim of the job asks for it before it takes a claim row
    (``jobclaims.claims.engine``), so a pause holds however the job starts.
    A resumed pause keeps its row, with who resumed it and when: the rows
    are the job's pause history.
    """

    job = models.CharField(_("job"), max_length=200)
    paused_by = models.CharField(
        _("paused by"),
        max_length=150,
        help_text=_("The OS user of the command, or the admin user, that paused the job."),
    )
    reason = models.TextField(_("reason"), blank=True)
    paused_at = models.DateTimeField(_("paused at"), db_default=DatabaseNow())
    until = models.DateTimeField(
        _("until"),
        null=True,
        blank=True,
        help_text=_("The pause ends by itself at this time; empty: until resumed."),
    )
    resumed_by = models.CharField(_("resumed by"), max_length=150, blank=True)
    resumed_at = models.DateTimeField(_("resumed at"), null=True, blank=True)

    objects = JobPauseManager()

    class Meta:
        verbose_name = _("job pause")
        verbose_name_plural = _("job pauses")
        get_latest_by = "paused_at"
        indexes = [
            # Every claim looks up its job's pauses not resumed.
            models.Index(fields=["job", "resumed_at"], name="jobclaims_pause_job_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job} paused by {self.paused_by}"


class RetiredJob(models.Model):
    """A job an operator retired: removed or renamed in the code, so that
    health stops watching it, while its claims stay for history.

    A claim of the job made after ``retired_at`` brings it back under watch
    (``jobclaims.health_reads``): a job that runs again is not retired.
    """

    job = models.CharField(_("job"), max_length=200)
    retired_by = models.CharField(
        _("retired by"), max_length=150, help_text=_("The OS user or admin user who retired it.")
    )
    retired_at = models.DateTimeField(_("retired at"), db_default=DatabaseNow())
    reason = models.TextField(_("reason"), blank=True)

    objects = ClaimsDatabaseManager["RetiredJob"]()

    class Meta:
        verbose_name = _("retired job")
        verbose_name_plural = _("retired jobs")
        constraints = [models.UniqueConstraint(fields=["job"], name="jobclaims_retired_job_uniq")]

    def __str__(self) -> str:
        return self.job


class ScheduleVersion(models.Model):
    """When a job's schedule came into force, one row per schedule it had.

    Catching up counts only the fires a schedule had due while it was in
    force: a fire from before ``since`` was never due, whatever claims a
    backfill or an older schedule left (``jobclaims.schedule_versions``).
    """

    job = models.CharField(_("job"), max_length=200)
    fingerprint = models.CharField(
        _("fingerprint"),
        max_length=16,
        help_text=_("A digest of the schedule and the time zone it is read in."),
    )
    schedule = models.CharField(_("schedule"), max_length=255)
    since = models.DateTimeField(_("in force since"), db_default=DatabaseNow())

    objects = ClaimsDatabaseManager["ScheduleVersion"]()

    class Meta:
        verbose_name = _("schedule version")
        verbose_name_plural = _("schedule versions")
        constraints = [
            models.UniqueConstraint(
                fields=["job", "fingerprint"], name="jobclaims_schedule_version_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job} {self.schedule!r} since {self.since}"


class ScheduledJob(JobRun):
    """The admin's schedules page, as an entry of the admin index: no table of its own.

    A proxy of ``JobRun`` so that the page sits beside the claims in the
    admin's list of models; the page lists the jobs of the code, not rows
    (``jobclaims.schedules_admin``).
    """

    class Meta:
        proxy = True
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")


class KnownCommand(models.Model):
    """A ``JobCommand`` some deploy's code had, recorded by ``migrate`` as
    content types are (``jobclaims.known_commands``).

    Health reads it to tell a job removed from the code, which is gone, from
    one run through ``claim()``, ``@claimed`` or Celery, which no code lists.
    """

    job = models.CharField(_("job"), max_length=200)
    first_seen_at = models.DateTimeField(_("first seen at"), db_default=DatabaseNow())

    objects = ClaimsDatabaseManager["KnownCommand"]()

    class Meta:
        verbose_name = _("known command")
        verbose_name_plural = _("known commands")
        constraints = [models.UniqueConstraint(fields=["job"], name="jobclaims_known_command_uniq")]

    def __str__(self) -> str:
        return self.job
