"""The claim a run of a job holds on its window, and how claims are taken."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, cast

from django.db import DatabaseError, IntegrityError, connections, models, transaction
from django.db.models import F, Max, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_lazy as _

from jobclaims import charsets, events, leases, retries, standby
from jobclaims.clock import DatabaseNow, database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import ClaimLost
from jobclaims.owner import process_owner
from jobclaims.sql import Rival, claim_statements

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper
    from django_stubs_ext import WithAnnotations


class Skips(TypedDict):
    """What ``JobRunQuerySet.with_skips()`` annotates on each run."""

    skips: int
    last_skipped_at: datetime.datetime | None


class _ReadAt(TypedDict):
    """The database's clock, annotated on a row as it is read."""

    db_now: datetime.datetime


class JobRunQuerySet(models.QuerySet["JobRun"]):
    """Claims filtered by state, always judged by the database's clock."""

    def running(self) -> JobRunQuerySet:
        return self.filter(status=JobRun.Status.RUNNING)

    def active(self) -> JobRunQuerySet:
        """Runs whose holder's lease has not run out."""
        return self.running().filter(expires_at__gt=DatabaseNow())

    def expired(self) -> JobRunQuerySet:
        """Runs still marked running whose lease ran out: their holder died."""
        return self.running().filter(expires_at__lte=DatabaseNow())

    def finished(self) -> JobRunQuerySet:
        return self.filter(status__in=[JobRun.Status.SUCCEEDED, JobRun.Status.FAILED])

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


# Bound to a name first: django-stubs builds the manager's typed methods only
# from a from_queryset() call assigned at module level.
_JobRunManagerBase = models.Manager.from_queryset(JobRunQuerySet)


class JobRunManager(_JobRunManagerBase["JobRun"]):
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
        already succeeded (pass ``force=True`` to run it again) or, unless
        ``allow_overlap``, a run of another window of the job still holds it.
        ``schedule`` names how the job's windows are cut ("hourly", see
        ``jobclaims.windows``), so that windows no instance claimed can be
        listed later.

        Claim outside any transaction, and run the job after this returns: a
        claim that has not committed is invisible to the other instances.
        """
        self.model.validate_claim(job, window, lease, schedule)
        db = jobclaims_settings.claims_database(self.model)
        new = self.model(
            job=job,
            window=window,
            schedule=schedule,
            owner=process_owner(),
            holds_job=None if allow_overlap else True,
        )
        connection = connections[db]
        connection.ensure_connection()
        # A commit may wait for a synchronous standby; never forever.
        with standby.bounded(connection) as watch:
            try:
                run, previous_status = self._claim_until_settled(connection, new, lease, force)
            except DatabaseError as error:
                if watch.fired:  # Cancelled before it committed anything.
                    raise standby.claim_not_acknowledged(job, window, None) from error
                raise
        if run is None:
            return None
        if watch.fired:
            raise standby.claim_not_acknowledged(job, window, run)
        events.acquired(run, previous_status)
        return run

    def _claim_until_settled(
        self,
        connection: BaseDatabaseWrapper,
        new: JobRun,
        lease: datetime.timedelta,
        force: bool,
    ) -> tuple[JobRun | None, str | None]:
        """Claim, starting again while the database asks for another try.

        A deadlock, a serialization failure or a lock timeout ends a claim's
        statement or transaction with nothing written (``retries``), and a
        row in the way that another transaction is writing is not settled
        yet (``_Unsettled``). Neither says who won, so each try starts from
        a fresh read of what has committed: the tries together still give
        one run. Inside the caller's transaction a failed statement may have
        ended that transaction (MariaDB rolls it all back on a deadlock), so
        there the error is raised for the caller to retry the whole of it.
        """
        waits = retries.pauses()
        last: Exception
        while True:
            try:
                with connection.cursor() as cursor:
                    return self._claim_once(cursor, new, lease, force)
            except _Unsettled as unsettled:
                last = unsettled
            except DatabaseError as error:
                if connection.in_atomic_block or not retries.is_transient(error):
                    raise
                last = error
            pause = next(waits, None)
            if pause is None:
                break
            time.sleep(pause)
        if isinstance(last, _Unsettled):
            # A transaction has been writing the row in the way all this
            # time: whoever it is, it is alive and has the job in hand.
            with connection.cursor() as cursor:
                self._skip(cursor, new, last.reason)
            return None, None
        raise last

    def _claim_once(
        self, cursor: CursorWrapper, new: JobRun, lease: datetime.timedelta, force: bool
    ) -> tuple[JobRun | None, str | None]:
        if claim_statements(cursor.db).claim_by_insert(cursor, new, lease):
            return new, None
        return self._contend(cursor, new, lease, force)

    def _contend(
        self, cursor: CursorWrapper, new: JobRun, lease: datetime.timedelta, force: bool
    ) -> tuple[JobRun | None, str | None]:
        """Claim past the rows in the way, or record a skip and return ``None``s.

        A plain read first: it never waits on a lock, and most refusals (the
        window is held or done) end here, touching no claim row.
        """
        seen = claim_statements(cursor.db).rivals(cursor, new)
        blocking = [rival for rival in seen if not _is_free(rival, new.window, force)]
        if blocking:
            self._skip(cursor, new, _skip_reason(new.window, blocking))
            return None, None
        try:
            run, previous_status = self._take(cursor, new, seen, lease, force)
        except IntegrityError:
            # Another instance inserted first: the constraint decided.
            run, previous_status = None, None
        if run is None:
            self._skip(cursor, new, JobSkip.Reason.HELD)
        return run, previous_status

    def _skip(self, cursor: CursorWrapper, new: JobRun, reason: str) -> None:
        """Record that this instance stepped aside, in one INSERT.

        The claim rows decided; a skip row is a note for operators, never
        worth failing the claim for. On SQLite a holder whose job keeps a
        write transaction open makes the INSERT give up after the busy
        timeout: the skip is logged, not recorded, and stays a skip.
        """
        try:
            with _savepoint_if_in_transaction(cursor.db.alias):
                claim_statements(cursor.db).skip(cursor, new, reason)
        except DatabaseError as error:
            events.skip_not_recorded(new.job, new.window, reason, error)
        events.skipped(self.model, new.job, new.window, reason)

    def _take(
        self,
        cursor: CursorWrapper,
        new: JobRun,
        seen: list[Rival],
        lease: datetime.timedelta,
        force: bool,
    ) -> tuple[JobRun | None, str | None]:
        """Insert the window's first claim, or take over the rows in its way."""
        db = cursor.db.alias
        if not seen:
            # The window's first claim: there is no row to lock yet, so the
            # unique constraints settle a race between instances.
            with _savepoint_if_in_transaction(db):
                claim_statements(cursor.db).insert(cursor, new, lease)
            return new, None
        return self._take_over(cursor, new, seen, lease, force)

    def _take_over(
        self,
        cursor: CursorWrapper,
        new: JobRun,
        seen: list[Rival],
        lease: datetime.timedelta,
        force: bool,
    ) -> tuple[JobRun | None, str | None]:
        """Reassign the window's row, and break dead runs' holds on the job.

        Returns the claimed run and the status its row had before (``None``
        for a new row), or ``(None, None)`` when another contender won.
        Every write is a compare-and-set that restates its condition, so a
        contender that read the same rows a moment earlier changes nothing.
        """
        db = cursor.db.alias
        runs = self.using(db)
        rivals = _rivals(new, force)
        with _row_lock_transaction(db):
            # Rows another contender has locked are skipped, not waited for:
            # that contender is settling them right now.
            # The cast names the annotation, which django-stubs carries
            # through the manager's methods but not this queryset's own.
            rows = cast(
                "list[WithAnnotations[JobRun, _ReadAt]]",
                list(
                    runs.select_for_update(skip_locked=True)
                    .filter(rivals.contested, rivals.free)
                    .annotate(db_now=DatabaseNow())
                ),
            )
            locked = {row.window for row in rows}
            if new.window not in locked and any(rival[0] == new.window for rival in seen):
                return None, None  # Another contender is taking it over.
            if any(rival[0] not in locked for rival in seen):
                # A dead holder read a moment ago is locked by another
                # transaction, most likely a contender clearing it for its
                # own claim. Inserting now would wait on that row while the
                # other waits on ours: a deadlock. Read again once it is done.
                raise _Unsettled(JobSkip.Reason.OVERLAP)
            dead_holders = [row.pk for row in rows if row.window != new.window]
            current = next((row for row in rows if row.window == new.window), None)
            if dead_holders:
                runs.filter(rivals.free, pk__in=dead_holders).update(holds_job=None)
            if current is None:
                claim_statements(cursor.db).insert(cursor, new, lease)
                return new, None
            previous_status = current.status
            if not self._reassign(current, new, lease, force):
                return None, None
        return current, previous_status

    def _reassign(
        self,
        current: WithAnnotations[JobRun, _ReadAt],
        new: JobRun,
        lease: datetime.timedelta,
        force: bool,
    ) -> bool:
        """Hand ``current`` over to ``new``'s holder, if no one else did first."""
        changes = {
            "owner": new.owner,
            "token": new.token,
            "status": JobRun.Status.RUNNING,
            "holds_job": new.holds_job,
            "claimed_at": current.db_now,
            "expires_at": current.db_now + lease,
            "finished_at": None,
            "error": "",
        }
        won = (
            self.using(current._state.db)
            .filter(_open_q(force), pk=current.pk, token=current.token)
            .update(attempt=F("attempt") + 1, **changes)
        )
        if not won:
            return False
        for name, value in changes.items():
            setattr(current, name, value)
        current.attempt += 1
        return True


class _Unsettled(Exception):
    """A row in the claim's way is being written by another transaction."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class _Rivals:
    """The rows that can stand in the way of a claim, as SQL conditions."""

    #: The window's own row and, unless overlap is allowed, the job's holder.
    contested: Q
    #: True for rows that no longer stand in the way: the window's row if it
    #: may be taken over, and a holder of another window whose lease ran out.
    free: Q


def _rivals(new: JobRun, force: bool) -> _Rivals:
    same_window = Q(window=new.window)
    # Each branch of the OR searches a whole unique index, (job, window) and
    # (job, holds_job), so the read stays an index lookup however many
    # finished runs the job has. holds_job is TRUE or NULL: "not NULL" is a
    # range an index can search, where SQLite writes "= TRUE" as a bare
    # column that it cannot.
    contested = Q(job=new.job, window=new.window)
    if new.holds_job:
        contested |= Q(job=new.job, holds_job__isnull=False)
    free = (same_window & _open_q(force)) | (~same_window & Q(expires_at__lte=DatabaseNow()))
    return _Rivals(contested=contested, free=free)


def _is_free(rival: Rival, window: str, force: bool) -> bool:
    """``_Rivals.free`` for a row already read: the same rule, in Python."""
    row_window, status, lapsed = rival
    if row_window != window:
        return lapsed
    if force and status == JobRun.Status.SUCCEEDED:
        return True
    return status == JobRun.Status.FAILED or (status == JobRun.Status.RUNNING and lapsed)


def _skip_reason(window: str, blocking: list[Rival]) -> str:
    """Why the rows in the way refuse the claim, for signals and logs."""
    for row_window, status, _lapsed in blocking:
        if row_window == window:
            if status == JobRun.Status.SUCCEEDED:
                return JobSkip.Reason.SUCCEEDED
            return JobSkip.Reason.HELD
    return JobSkip.Reason.OVERLAP


def _open_q(force: bool) -> Q:
    """Rows the next instance may take over: failed, dead, or forced."""
    open_ = Q(status=JobRun.Status.FAILED) | Q(
        status=JobRun.Status.RUNNING, expires_at__lte=DatabaseNow()
    )
    if force:
        open_ |= Q(status=JobRun.Status.SUCCEEDED)
    return open_


def _savepoint_if_in_transaction(db: str) -> AbstractContextManager[object]:
    """Keep a conflicting INSERT from breaking the caller's transaction.

    Outside any transaction a lone INSERT is atomic already, and wrapping it
    in one would cost two more round trips (BEGIN, COMMIT) on every claim,
    and make the losers of a race wait that much longer on the winner's row.
    """
    if connections[db].in_atomic_block:
        return transaction.atomic(using=db)
    return nullcontext()


def _row_lock_transaction(db: str) -> AbstractContextManager[object]:
    """A transaction to hold row locks in, where the database has row locks.

    SQLite has none: it ignores FOR UPDATE, and a transaction that reads and
    then writes fails at once with "database is locked" when another process
    wrote first. There each statement commits on its own, and the
    compare-and-set conditions on every write keep the claim exact.
    """
    if connections[db].features.has_select_for_update:
        return transaction.atomic(using=db)
    return nullcontext()


class JobRun(models.Model):
    """One window of one job, and who holds it until when.

    The row for ``(job, window)`` is created by the window's first claim and
    reused by every takeover, so ``attempt`` counts the holders it had.
    """

    class Status(models.TextChoices):
        RUNNING = "running", _("running")
        SUCCEEDED = "succeeded", _("succeeded")
        FAILED = "failed", _("failed")

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
    # db_default makes Django read these back with RETURNING after an INSERT
    # that sets them from the database clock.
    claimed_at = models.DateTimeField(_("claimed at"), db_default=DatabaseNow())
    expires_at = models.DateTimeField(_("expires at"), db_default=DatabaseNow())
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True)

    objects = JobRunManager()

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
        ]

    def __str__(self) -> str:
        return f"{self.job} {self.window}"

    @classmethod
    def validate_claim(
        cls, job: str, window: str, lease: datetime.timedelta, schedule: str = ""
    ) -> None:
        """Refuse a claim that the table could not store, naming the fix.

        Checked here, before any statement: MariaDB's ``INSERT IGNORE``
        would cut an overlong value short instead of refusing it, and a lease
        past ``leases.MAX_LEASE`` can end where no database keeps a date.
        """
        for name, value in (("job", job), ("window", window), ("schedule", schedule)):
            field = cls._meta.get_field(name)
            # job, window and schedule are CharFields: each has a max_length.
            assert isinstance(field, models.CharField)
            assert field.max_length is not None
            limit = field.max_length
            if not value and not field.blank:
                raise ValueError(f"a claim needs a {name} name")
            if len(value) > limit:
                raise ValueError(
                    f"{name} {value!r} is {len(value)} characters long; "
                    f"shorten it to at most {limit}"
                )
        cls._refuse_what_a_column_would_lose(job=job, window=window, schedule=schedule)
        if problem := leases.problem(lease):
            raise ValueError(f"lease {problem}")

    @classmethod
    def _refuse_what_a_column_would_lose(cls, **values: str) -> None:
        """Refuse a 4-byte character where a column would store it as "?" or
        take it for any other (MariaDB's utf8mb3 and older collations).

        Only a name with such a character asks the database, once per
        process; see ``jobclaims.charsets``.
        """
        wide = {
            name: char
            for name, value in values.items()
            if (char := charsets.needs_four_bytes(value))
        }
        if not wide:
            return
        connection = connections[jobclaims_settings.claims_database(cls)]
        tables = [cls._meta.db_table, JobSkip._meta.db_table]
        lossy = charsets.cached_lossy_columns(connection, tables)
        for name, char in wide.items():
            for (table, column), why in sorted(lossy.items()):
                if column == name:
                    raise ValueError(
                        f"{name} {values[name]!r} has {char!r}, a character of 4 bytes, and "
                        f"the {table}.{column} column {why}; convert the table with "
                        f"ALTER TABLE {table} {charsets.CONVERSION}, or leave the character out"
                    )

    def release(self, status: str = Status.SUCCEEDED, error: str = "") -> bool:
        """Record how the run ended and let the job's next run in.

        Returns ``False``, and writes nothing, when this claim is no longer
        ours: another instance took it over after our lease ran out. A
        deadlock or lock timeout is tried again (``retries.retrying``): the
        outcome of work that ran must not be lost to one.
        """
        if status not in (self.Status.SUCCEEDED, self.Status.FAILED):
            raise ValueError(f"release() takes succeeded or failed, not {status!r}")
        db = self._state.db
        assert db is not None, "a claimed run was saved, so it has a database"
        connection = connections[db]
        connection.ensure_connection()

        def release_once() -> bool:
            with connection.cursor() as cursor:
                return claim_statements(connection).release(cursor, self, status, error)

        with standby.bounded(connection) as watch:
            released = retries.retrying(connection, release_once)
        standby.warn_if_not_acknowledged(watch, f"the {status} outcome", self)
        if not released:
            return False
        self.status, self.error, self.holds_job = status, error, None
        # Set by the database clock: loaded from the row if it is read.
        del self.finished_at
        events.finished(self)
        return True

    def renew(self, lease: datetime.timedelta, *, until: datetime.datetime | None = None) -> bool:
        """Extend the lease to ``lease`` from now, by the database clock, but
        not past ``until``.

        One autocommitted UPDATE: no lock outlives the statement, so a
        renewing process that pauses never blocks a takeover. It extends only
        a lease that has not run out, judged by the database clock in that
        UPDATE: a lease that ended (it lapsed, or an operator expired it) is
        never revived, even before another instance takes the window over.
        Returns ``False``, and extends nothing, once the lease has ended or
        the claim is no longer held.
        """
        db = self._state.db
        assert db is not None, "a claimed run was saved, so it has a database"
        expires_at = database_now(db) + lease
        if until is not None:
            expires_at = min(expires_at, until)
        running = self._held_rows().filter(expires_at__gt=DatabaseNow())
        connection = connections[db]
        connection.ensure_connection()
        with standby.bounded(connection) as watch:
            renewed = retries.retrying(connection, lambda: running.update(expires_at=expires_at))
        standby.warn_if_not_acknowledged(watch, "the renewal", self)
        if not renewed:
            return False
        self.expires_at = expires_at
        return True

    def ensure_held(self) -> None:
        """Raise ``ClaimLost`` unless this run still holds its claim.

        Call it between steps of a long job: one indexed read.
        """
        if not self._held_rows().exists():
            raise ClaimLost(self._lost_message())

    @contextmanager
    def fenced(self) -> Iterator[None]:
        """A transaction whose writes commit only while the claim is held.

        Entering it locks the claim row and checks the token with one UPDATE,
        which also takes SQLite's write lock at once, so no takeover can
        interleave until the block commits or rolls back. Keep the block
        short: while it is open, the next instance cannot take the window over.
        Raises ``ClaimLost`` on entry, writing nothing, if the claim was lost.

        Under REPEATABLE READ or SERIALIZABLE, entering while the heartbeat
        renews the lease ends the transaction with a serialization failure;
        nothing of the block has run then, so it is entered again in a new
        transaction (unless it is nested in one of the caller's).
        """
        db = self._state.db
        assert db is not None, "a claimed run was saved, so it has a database"
        waits = retries.pauses() if not connections[db].in_atomic_block else iter(())
        entered = False
        while True:
            try:
                with transaction.atomic(using=db):
                    if not self._held_rows().update(status=F("status")):
                        raise ClaimLost(self._lost_message())
                    entered = True
                    yield
                return
            except DatabaseError as error:
                pause = next(waits, None)
                if entered or pause is None or not retries.is_transient(error):
                    raise
            time.sleep(pause)

    def _held_rows(self) -> JobRunQuerySet:
        """This run's row, as long as this run still holds it."""
        return (
            type(self)
            .objects.using(self._state.db)
            .filter(
                pk=self.pk,
                token=self.token,
                status=self.Status.RUNNING,
                holds_job=self.holds_job,
            )
        )

    def _lost_message(self) -> str:
        return (
            f"{self.job} {self.window} is no longer held by {self.owner}: its "
            "lease ran out and another instance took over"
        )


class JobSkip(models.Model):
    """Instances that stepped aside for one window of a job, for one reason.

    One row per job, window and reason, however many instances stepped
    aside: each skip adds one to ``count`` and leaves its owner and time as
    the last. Two beats sending a task every second would otherwise add a
    row per duplicate, 150,000 a day (docs/performance.md). Skips have a
    table of their own, written with one statement that never touches a
    claim row, so recording a skip never slows the holder.
    """

    class Reason(models.TextChoices):
        HELD = "held", _("another instance held the window")
        SUCCEEDED = "succeeded", _("the window had already succeeded")
        OVERLAP = "overlap", _("a run of another window held the job")

    job = models.CharField(_("job"), max_length=200)
    window = models.CharField(_("window"), max_length=64)
    owner = models.CharField(_("last skipped by"), max_length=255)
    reason = models.CharField(_("reason"), max_length=16, choices=Reason)
    count = models.PositiveIntegerField(_("times skipped"), default=1)
    skipped_at = models.DateTimeField(_("last skipped at"), db_default=DatabaseNow())

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
