"""The claim a run of a job holds on its window: the row, and the claim's façade.

How a claim is decided lives in ``jobclaims.claims``: the rule for when a
row may be taken over, the engine that takes it, and each database's
statements.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

from django.db import models
from django.utils.translation import gettext_lazy as _

from jobclaims.claims import batch, rule, validation
from jobclaims.claims.engine import Claim, Takeover, process_owner
from jobclaims.claims.rule import Refusal
from jobclaims.models.managers import ClaimsDatabaseManager
from jobclaims.models.run_queries import JobRunQuerySet
from jobclaims.models.skips import JobSkip
from jobclaims.time import leases, slots
from jobclaims.time.clock import DatabaseNow

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
        series: str | None = None,
    ) -> JobRun | None:
        """Claim ``window`` of ``job`` for this process, or return ``None``.

        ``None`` means another holder's lease has not run out, the window
        already succeeded (pass ``force=True`` to run it again), unless
        ``allow_overlap`` a run of another window of the job still holds it,
        or a run of another window covering the same time succeeded or is
        held (``jobclaims.time.slots``); ``try_claim()`` says which. ``schedule``
        names how the job's windows are cut ("hourly", or a cron expression:
        ``Slots.recorded_schedule`` in ``jobclaims.time.slots``), so that windows
        no instance claimed can be listed later, and each window's slot known.
        ``series`` names the schedule whose fire ``window`` is, the same under
        any name (``JobSchedule.series``): a fire claimed under one name of
        it is refused under another.

        Claim outside any transaction, and run the job after this returns: a
        claim that has not committed is invisible to the other instances.
        """
        outcome = self.try_claim(
            job,
            window,
            lease=lease,
            force=force,
            allow_overlap=allow_overlap,
            schedule=schedule,
            series=series,
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
        series: str | None = None,
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
        new = self.model.new_claim(
            job,
            window,
            lease,
            owner=owner or process_owner(),
            allow_overlap=allow_overlap,
            schedule=schedule,
            series=series,
        )
        # A database jobclaims has no SQL for is refused before any statement.
        # A paused job starts no run, however it was started (jobclaims.controls.pauses).
        outcome = Claim(
            new, self.claims_db(), lease=lease, rule=Takeover(force, take_failed), details=details
        ).take()
        # The claim hands back the row it was given or read from this table.
        return outcome if isinstance(outcome, Refusal) else cast("JobRun", outcome)

    def renew_all(self, runs: Sequence[JobRun], lease: datetime.timedelta) -> None:
        """Extend the lease of each of ``runs`` that still holds its claim to
        ``lease`` from now, by the database clock, in the two statements
        ``JobRun.renew()`` sends for one (``Claim.renew_together()``): for
        the fires a scheduler won together and sent to their queue. A run
        whose lease ended is not revived, and keeps the lease it had in
        memory."""
        Claim.renew_together(runs, lease)

    def try_claim_many(
        self,
        fires: Sequence[batch.Fire],
        owner: str | None = None,
        then: Callable[[JobRun], object] | None = None,
    ) -> list[JobRun | Refusal | None]:
        """Claim many fires due at one instant, in a few statements for all
        of them (``jobclaims.claims.batch``): for each fire, its held run,
        the ``Refusal`` recorded as its skip, or ``None`` where the batch
        did not settle it (its row's holder died, it failed, a pause or a
        slot's run refuses it): claim that one with ``try_claim()``, which
        takes over or refuses by the whole rule.

        For a scheduler's look: no force, and a failed window left alone.
        Outside any transaction, and off a Galera node: there every fire
        comes back ``None``. ``then`` is called with each run won, in the
        transaction that claims it, so that what it writes to the claims
        database (a task's message) commits with the claim or not at all.
        """
        outcomes = batch.claim_fires(
            self.model, fires, self.claims_db(), owner, cast("Callable[[Any], object]", then)
        )
        # The batch hands back the rows it was given.
        return cast("list[JobRun | Refusal | None]", outcomes)


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
    # The interval the window covers (jobclaims.time.slots): a claim is refused
    # while another window of the job whose slot overlaps it succeeded or is
    # held. NULL for a claim with no schedule name, which is not compared.
    slot_start = models.DateTimeField(_("slot start"), null=True, blank=True, editable=False)
    slot_end = models.DateTimeField(_("slot end"), null=True, blank=True, editable=False)
    # What a schedule's fires are whatever it is named (jobclaims.claims.naming):
    # unique with the window, so that a fire claimed under one name of its
    # schedule is refused under another. NULL, not "", for a claim of no
    # schedule: NULLs never collide in a unique index.
    series = models.CharField(  # noqa: DJ001
        _("series"),
        max_length=16,
        null=True,
        blank=True,
        editable=False,
        help_text=_("A digest of the schedule whose fire this is, the same under any name."),
    )
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
    # Written by the scheduler that starts a fire its overlap policy held
    # back (jobclaims.jobs.schedules.Overlap), so that the run tells why it
    # started late; db_default, as cancelled_by.
    overlap = models.CharField(
        _("overlap"),
        max_length=16,
        blank=True,
        default="",
        db_default="",
        help_text=_(
            "buffer or replace: the fire waited for the job's run before it to end, as the "
            "job's overlap policy says; empty: it found none going."
        ),
    )
    # A task fire's claim is taken by the scheduler that enqueued it and
    # adopted by the worker that runs it (jobclaims.running.queued): until
    # then it is enqueued, NULL here.
    started_at = models.DateTimeField(
        _("started at"),
        null=True,
        blank=True,
        help_text=_("When a worker started a task fire's run; empty while it waits in its queue."),
    )
    # What a JobCommand's run printed, its last OUTPUT_KEPT bytes, written by
    # its release (jobclaims.running.output). NULL: nothing was captured (a
    # run through claim() or a task, or one whose process was killed), which
    # "" (it printed nothing) is not.
    output = models.TextField(  # noqa: DJ001 (NULL means "not captured")
        _("output"),
        null=True,
        blank=True,
        help_text=_("The end of what the run printed, stdout and stderr; empty if not captured."),
    )

    objects = JobRunManager()

    #: Until when, on ``leases.clock()``, this process knows its lease is
    #: held: set by the claim and each renewal, measured from before its
    #: statement was sent. None for a row this process only read.
    held_until: float | None = None
    #: When, on ``leases.clock()``, this process read that the run's job was
    #: not paused, once its claim had committed (the claim's own read after
    #: its commit). None for a row this process only read, or claimed inside
    #: a transaction, whose commit comes later.
    unpaused_at: float | None = None

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
            models.UniqueConstraint(
                fields=["series", "window"], name="jobclaims_jobrun_series_window_uniq"
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
    def new_claim(
        cls,
        job: str,
        window: str,
        lease: datetime.timedelta,
        *,
        owner: str,
        allow_overlap: bool = False,
        schedule: str = "",
        series: str | None = None,
    ) -> JobRun:
        """The row a claim of ``window`` inserts, not saved; its input
        checked first (``validate_claim()``), so bad input writes nothing.
        Its slot is the window's under ``schedule``, if it names one."""
        cls.validate_claim(job, window, lease, schedule, owner)
        slot_start, slot_end = slots.bounds(schedule, window) or (None, None)
        return cls(
            job=job,
            window=window,
            schedule=schedule,
            owner=owner,
            holds_job=None if allow_overlap else True,
            slot_start=slot_start,
            slot_end=slot_end,
            series=series,
        )

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

    def release(
        self, status: str = Status.SUCCEEDED, error: str = "", output: str | None = None
    ) -> bool:
        """Record how the run ended, and what it printed (``output``, if it
        was captured), and let the job's next run in.

        Returns ``False``, and writes nothing, when this claim is no longer
        ours: another instance took it over after our lease ran out. A
        moment's fault is tried again until the outcome is recorded or the
        lease is gone (``Claim.release()``); then the last error is raised.
        """
        if status not in (self.Status.SUCCEEDED, self.Status.FAILED, self.Status.TIMED_OUT):
            raise ValueError(f"release() takes succeeded, failed or timed-out, not {status!r}")
        return Claim(self).release(status, error, output)

    def renew(
        self,
        lease: datetime.timedelta,
        *,
        until: datetime.datetime | None = None,
        unless_renewed: bool = False,
    ) -> bool:
        """Extend the lease to ``lease`` from now, by the database clock, but
        not past ``until``; ``False`` once the lease has ended or the claim is
        no longer held (``Claim.renew()``). With ``unless_renewed``, also
        ``False``, extending nothing, once another process holding the claim
        (the job's process that adopted a scheduler's claim) renewed it since
        this one last did."""
        return Claim(self).renew(lease, until, unless_renewed)

    def resume(self, lease: datetime.timedelta, *, owner: str) -> bool:
        """Take the run up again under a new token, as ``owner``, its lease
        renewed; ``False`` once another copy of its retry, or another
        instance, did first, or the lease ended (``Claim.resume()``)."""
        return Claim(self).resume(owner, lease)

    def paused(self) -> Refusal | None:
        """The refusal of this held run by a pause of its job in force now,
        or None: one read, which a run makes right before it starts."""
        return Claim(self).paused()

    def give_back(self, refusal: Refusal) -> bool:
        """End this held run, which the pause ``refusal`` names refused
        before it started: recorded cancelled by whoever paused the job,
        its lease ended (``Claim.give_back()``). ``False`` if the run no
        longer holds its claim."""
        return Claim(self).give_back(refusal)

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


class ScheduledJob(JobRun):
    """The admin's schedules page, as an entry of the admin index: no table of its own.

    A proxy of ``JobRun`` so that the page sits beside the claims in the
    admin's list of models; the page lists the jobs of the code, not rows
    (``jobclaims.admin.schedules``).
    """

    class Meta:
        proxy = True
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
