"""One claim, from its first statement to a held run or a refusal, and on to its end.

``JobRun.objects.try_claim()`` builds the new row and hands it to a
``Claim``. Most claims are settled by one INSERT; a claim that meets rows
reads them once, judges them by the takeover rule (``jobclaims.claims.rule``),
and either takes them over with compare-and-set writes or steps aside,
saying which row refused it. The held run's ``release()``, ``renew()`` and
``fenced()`` come back here too: every write a holder makes is a
compare-and-set on its token, its standby wait bounded and tried again
while the database asks (``jobclaims.claims.retries``).

The unique constraints are the real guarantee; row locks, where the
database has them, make contenders skip instead of wait.
"""

from __future__ import annotations

import datetime
import functools
import os
import secrets
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.models import F, Q

from jobclaims.claims import events, retries, standby
from jobclaims.claims.rule import (
    PauseNote,
    Reason,
    Refusal,
    Status,
    frees,
    frees_q,
    may_take_over_q,
)
from jobclaims.claims.statements import (
    ClaimedThenRead,
    ClaimRow,
    ClaimStatements,
    Released,
    Rival,
    claim_statements,
)
from jobclaims.exceptions import ClaimLost
from jobclaims.time import leases
from jobclaims.time.clock import DatabaseNow, as_utc, database_now

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper
    from django.db.models import QuerySet

_T = TypeVar("_T")


class Takeover(NamedTuple):
    """Which rows a claim may take over, as ``rule.may_take_over`` takes it."""

    force: bool = False
    take_failed: bool = True


#: The rule of a claim that neither forces nor leaves failed rows alone.
_ANY_OPEN_ROW = Takeover()

#: A claim taken: the run, and the status its row had before (None for a new row).
Taken = tuple[ClaimRow, "str | None"]

# Host and pid alone are not unique: every container's first process is pid 1,
# and pids are reused. A random id drawn per process settles it.
_PROCESS_ID = secrets.token_hex(4)


def _draw_again() -> None:
    """Give a forked child an id of its own.

    A Celery worker (or gunicorn) imports the app, then forks its pool: the
    children would all carry the parent's id, and a reused pid in one of
    them would make its owner indistinguishable from the parent's.
    """
    global _PROCESS_ID
    _PROCESS_ID = secrets.token_hex(4)
    process_owner.cache_clear()


os.register_at_fork(after_in_child=_draw_again)


@functools.cache
def process_owner() -> str:
    """The name a claim records for its holder: ``host:pid:random-id``.

    Worked out once per process (a forked child works its own out): the
    host's name and the pid are a system call each, and every claim asks."""
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{_PROCESS_ID}"


class Claim:
    """One run's claim of its window, in the database ``db``.

    A claim being taken carries what every step of the attempt needs: the
    new row, its lease, which rows it may take over, whether a refusal must
    name its row, and the budget of retries the whole attempt shares. A
    claim held (``Claim(run)`` of a run the table returned) carries only
    its run: its writes are compare-and-sets on the run's token.
    """

    def __init__(
        self,
        run: ClaimRow,
        db: str | None = None,
        *,
        lease: datetime.timedelta | None = None,
        rule: Takeover = _ANY_OPEN_ROW,
        details: bool = True,
    ):
        db = db or run._state.db
        assert db is not None, "a claimed run was saved, so it has a database"
        self.run = run
        self.db = db
        self.connection = connections[db]
        self.lease = lease
        self.rule = rule
        self.details = details
        self.waits: Iterator[float] = iter(())
        #: What the claim's INSERT read once it committed, where it read it
        #: in the same round trip (``_insert_then_read()``).
        self.read_after_commit: ClaimedThenRead | None = None

    @functools.cached_property
    def statements(self) -> ClaimStatements:
        """The database's statements, chosen on their first use.

        Choosing them may ask the server (MariaDB: is it a Galera node?),
        so that is the claim's first statement: chosen inside the claim's
        tries, a connection lost or timed out there is tried again.
        """
        return claim_statements(self.connection)

    # Taking the claim.

    def take(self) -> ClaimRow | Refusal:
        """Claim the window: the new run, or the window's row it took over,
        as stored; or the ``Refusal`` that was recorded as a skip.

        Without ``details`` the refusal may name only its reason, not the
        row that refused the claim, which saves the loser of a race one
        statement. The run's ``held_until`` says until when its lease is
        surely held: the lease counts from before the first statement was
        sent, however long the commit took to return. A connection lost on
        the way is opened again and the claim tried again within the same
        budget (``retries.pauses()``), first looking for its own token: the
        lost try may have committed.
        """
        assert self.lease is not None, "a claim being taken has a lease"
        sent_at = leases.clock()
        self.waits = retries.pauses()
        maybe_committed = False
        while True:
            try:
                outcome = self._take_bounded(maybe_committed)
                break
            except DatabaseError as error:
                pause = next(self.waits, None)
                # A cancel meant for an earlier statement (its watch did not
                # fire here, or StandbyTimeout was raised) wrote nothing.
                again = retries.is_disconnect(error) or retries.is_cancelled(error)
                if self.connection.in_atomic_block or not again or pause is None:
                    raise
                retries.reconnect_after(self.connection, error)
                maybe_committed = True
            time.sleep(pause)
        if isinstance(outcome, Refusal):
            return outcome
        run, previous_status = outcome
        if refusal := self._refused_after_commit(run, previous_status):
            return self._give_back(run, previous_status, refusal)
        if not self.connection.in_atomic_block:
            run.unpaused_at = leases.clock()
        run.held_until = leases.held_until(sent_at, self.lease)
        events.acquired(run, previous_status)
        return run

    def _take_bounded(self, maybe_committed: bool) -> Taken | Refusal:
        """One connection's try at the claim, its commit bounded by STANDBY_TIMEOUT.

        A paused job starts no run, however it was started, and a slot
        another run covers is not run again: the pauses and the slot's runs
        are read before any claim row, unless the claim's first INSERT asks
        for them itself (``_refusals_in_insert()``).
        """
        new = self.run
        self.read_after_commit = None
        self.connection.ensure_connection()
        # A read, so tried again while the database asks (SQLite's busy file).
        if not self._refusals_in_insert() and (
            refusal := retries.retrying(self.connection, self._refusal_before_the_claim)
        ):
            with self.connection.cursor() as cursor:
                return self._skip(cursor, refusal)
        # A commit may wait for a synchronous standby; never forever.
        with standby.bounded(self.connection) as watch:
            try:
                mine = self._own_claim() if maybe_committed else None
                if mine is not None:
                    outcome: Taken | Refusal = (mine, None)
                else:
                    outcome = self._take_until_settled()
            except DatabaseError as error:
                if watch.fired:  # Cancelled before it committed anything.
                    raise standby.claim_not_acknowledged(new.job, new.window, None) from error
                raise
        if not isinstance(outcome, Refusal) and watch.fired:
            raise standby.claim_not_acknowledged(new.job, new.window, outcome[0])
        return outcome

    def _refusals_in_insert(self) -> bool:
        """Whether the claim's first INSERT asks for the job's pauses and the
        runs covering its slot, so that only a claim it did not settle reads
        them (``_take_once()``): then a claim of a new window or fire is one
        statement (PostgreSQL). Its refusal names the pause first, as the
        read before the claim does, so a paused job's always says paused."""
        return self.statements.checks_refusals_in_insert(self.connection)

    def _refusal_before_the_claim(self) -> Refusal | None:
        with self.connection.cursor() as cursor:
            return self._refusing(cursor)

    def _refusing(self, cursor: CursorWrapper) -> Refusal | None:
        """The pause of a paused job, else a run of another window covering
        the claim's slot that is held or succeeded (``jobclaims.time.slots``;
        unless forced): each refuses the claim before any claim row is read
        or taken. One read."""
        new = self.run
        if self.rule.force or new.slot_start is None or new.slot_end is None:
            return self._pause(cursor)
        found = self.statements.pause_or_slot_run(cursor, new)
        if isinstance(found, PauseNote):
            return Refusal(new.job, new.window, Reason.PAUSED, paused=found)
        return None if found is None else self._slot_refusal(found)

    def _pause(self, cursor: CursorWrapper) -> Refusal | None:
        """The refusal of a claim of a paused job, naming the pause."""
        note = self.statements.pause(cursor, self.run)
        if note is None:
            return None
        return Refusal(self.run.job, self.run.window, Reason.PAUSED, paused=note)

    def _own_claim(self) -> ClaimRow | None:
        """The window's row with the new run's token, if a try whose answer
        was lost committed it. The token is drawn per claim, so no other
        instance's row can carry it."""
        new = self.run
        mine: ClaimRow | None = (
            self._rows()
            .filter(job=new.job, window=new.window, token=new.token, status=Status.RUNNING)
            .first()
        )
        return mine

    def _refused_after_commit(self, run: ClaimRow, previous_status: str | None) -> Refusal | None:
        """What refuses the claim ``run`` just took, read once it committed:
        a pause of the job, or, for a new row of a slot (unless forced), a
        run of another window covering the slot that succeeded. One read,
        which PostgreSQL sends behind the claim's INSERT and its COMMIT, in
        the same round trip (``_insert_then_read()``).

        Each may have committed while the claim was being taken, after the
        read before it or within its own INSERT, which could not see it.
        Read after the claim's commit, one that committed before it is
        seen: from a pause's commit, no claim of the job wins, on any
        database. (Inside the caller's transaction the claim commits with
        it, later: a pause that comes between is met by the run's own look
        before it starts, ``holding()``.)

        Only a success of the slot refuses here: two claims of overlapping
        slots that met while both were held must not both give way. Unless
        overlap is allowed, the one-holder constraint never lets them both
        hold; with overlap allowed, they both run.
        """
        slotted = run.slot_start is not None and run.slot_end is not None
        if previous_status is None and self.read_after_commit is not None:
            found = self.read_after_commit.refusing  # Read with the INSERT, after its COMMIT.
        else:
            with self.connection.cursor() as cursor:
                if previous_status is not None or self.rule.force or not slotted:
                    return self._pause(cursor)
                found = self.statements.pause_or_slot_succeeded(cursor, run)
        if isinstance(found, PauseNote):
            return Refusal(run.job, run.window, Reason.PAUSED, paused=found)
        return None if found is None else self._slot_refusal(found)

    def _slot_refusal(self, row: Rival | ClaimRow, held_job: str | None = None) -> Refusal:
        """The refusal of a claim by ``row``, a run covering the same slot: of
        another window of the job, or, ``held_job`` naming it, of the same
        fire under another name of its schedule."""
        new = self.run
        return Refusal(
            new.job,
            new.window,
            Reason.SLOT_RAN,
            held_window=row.window,
            held_job=held_job,
            owner=row.owner,
            status=row.status,
            expires_at=as_utc(row.expires_at),
            finished_at=None if row.finished_at is None else as_utc(row.finished_at),
        )

    def _give_back(self, run: ClaimRow, previous_status: str | None, refusal: Refusal) -> Refusal:
        """Give back the claim ``run`` just took, which ``refusal`` refuses
        after all (``_refused_after_commit()``), and record the skip: a new
        row is deleted; a row taken over, whose history stays, ends
        cancelled by the pause that refused it (``Claim.give_back()``)."""
        if previous_status is None:
            self._rows().filter(pk=run.pk, token=run.token).delete()
        else:
            Claim(run, self.db).give_back(refusal)
        with self.connection.cursor() as cursor:
            return self._skip(cursor, refusal)

    # A held claim's start.

    def paused(self) -> Refusal | None:
        """The refusal of the held run by a pause of its job in force now:
        one read, which a run makes right before it starts."""
        with self.connection.cursor() as cursor:
            return self._pause(cursor)

    def give_back(self, refusal: Refusal) -> bool:
        """End the held run, which a pause refused before it started:
        ``cancelled`` by whoever paused its job, its lease and its hold on
        the job ended, and why in its ``error``, so that the window is
        counted refused by the pause, and open again once it is resumed.
        One compare-and-set UPDATE on the run's token; ``False`` if the run
        no longer holds its claim."""
        assert refusal.paused is not None, "a refusal by a pause"
        note = refusal.paused
        rows = self._rows().filter(pk=self.run.pk, token=self.run.token, status=Status.RUNNING)
        whose = "all jobs were" if note.of_all_jobs else "its job was"
        why = (
            f"Not started: {whose} paused by {note.by} at {note.at:%Y-%m-%d %H:%M:%S} UTC "
            "after this run's claim, before the run started, so the pause refused it"
        )
        now = DatabaseNow()
        changed = rows.update(
            status=Status.CANCELLED,
            cancelled_by=note.by,
            cancelled_at=now,
            expires_at=now,
            finished_at=now,
            holds_job=None,
            error=why,
        )
        if changed:
            self.run.status = Status.CANCELLED
        return bool(changed)

    def _take_until_settled(self) -> Taken | Refusal:
        """Claim, starting again while the database asks for another try.

        A deadlock, a serialization failure or a lock timeout ends a claim's
        statement or transaction with nothing written (``retries``), and a
        row in the way that another transaction is writing is not settled
        yet (``_Unsettled``). Neither says who won, so each try starts from
        a fresh read of what has committed: the tries together still give
        one run. Inside the caller's transaction a failed statement may have
        ended that transaction (MariaDB rolls it all back on a deadlock), so
        there the error is raised for the caller to retry the whole of it. A
        lost connection is raised, for ``take()`` to open a fresh one.
        """
        last: Exception
        while True:
            try:
                with self.connection.cursor() as cursor:
                    return self._take_once(cursor)
            except _Unsettled as unsettled:
                last = unsettled
            except DatabaseError as error:
                if (
                    self.connection.in_atomic_block
                    or not retries.is_transient(error)
                    or retries.is_disconnect(error)
                ):
                    raise
                last = error
            pause = next(self.waits, None)
            if pause is None:
                break
            time.sleep(pause)
        if isinstance(last, _Unsettled):
            # A transaction has been writing the row in the way all this
            # time: whoever it is, it is alive and has the job in hand.
            with self.connection.cursor() as cursor:
                return self._skip(cursor, Refusal(self.run.job, self.run.window, last.reason))
        raise last

    def _take_once(self, cursor: CursorWrapper) -> Taken | Refusal:
        new = self.run
        if self._insert_then_read(cursor):
            return new, None
        # Nothing inserted: a row in the way, or (if it asked) a pause or a slot's run.
        if self._refusals_in_insert() and (refusal := self._refusing(cursor)):
            return self._skip(cursor, refusal)
        if (
            not self.details
            and not self.rule.force
            and (reason := self.statements.skip_if_blocked(cursor, new))
        ):
            # The INSERT met a row, and the skip found it refusing: two
            # statements for a loser that needs no more than the reason.
            refusal = Refusal(new.job, new.window, Reason(reason))
            events.skipped(type(new), refusal)
            return refusal
        return self._contend(cursor)

    def _insert_then_read(self, cursor: CursorWrapper) -> bool:
        """Claim with one INSERT (``ClaimStatements.claim_by_insert()``) and,
        where the database takes both in one round trip (PostgreSQL), read
        what refuses it after its commit right behind it: the read that
        ``_refused_after_commit()`` would send next."""
        new, lease = self.run, self.lease
        assert lease is not None
        slotted = new.slot_start is not None and new.slot_end is not None
        sent = self.statements.claim_then_read(cursor, new, lease, slotted and not self.rule.force)
        if sent is None:
            return self.statements.claim_by_insert(cursor, new, lease)
        if sent.inserted:
            self.read_after_commit = sent
        return sent.inserted

    def _contend(self, cursor: CursorWrapper) -> Taken | Refusal:
        """Claim past the rows in the way, or record a skip and return why.

        A plain read first: it never waits on a lock, and most refusals (the
        window is held or done) end here, touching no claim row.
        """
        new = self.run
        seen = self.statements.rivals(cursor, new)
        blocking = [
            row
            for row in seen
            if not frees(row.window, row.status, row.lapsed, new.window, *self.rule)
        ]
        if blocking:
            return self._skip(cursor, self._refusal(blocking))
        try:
            taken = self._take(cursor, seen)
        except IntegrityError:
            # Another instance inserted first: the constraint decided. It
            # may have claimed the fire under another name of its schedule.
            if refusal := self._claimed_in_series():
                return self._skip(cursor, refusal)
            taken = None
        if taken is None:
            return self._skip(cursor, Refusal(new.job, new.window, Reason.HELD))
        return taken

    def _claimed_in_series(self) -> Refusal | None:
        """The refusal of the claim of the new run's fire under another name
        of its schedule, which the (series, window) constraint met."""
        new = self.run
        if new.series is None:
            return None
        row = self._rows().filter(series=new.series, window=new.window).exclude(job=new.job).first()
        return None if row is None else self._slot_refusal(row, held_job=row.job)

    def _refusal(self, blocking: list[Rival]) -> Refusal:
        """Why the rows in the way refuse the claim: the window's own row first."""
        new = self.run
        row = min(blocking, key=lambda rival: rival.window != new.window)
        if row.window != new.window:
            reason = Reason.OVERLAP
        elif row.status == Status.SUCCEEDED:
            reason = Reason.SUCCEEDED
        elif row.status == Status.RUNNING or (row.status == Status.CANCELLED and not row.lapsed):
            reason = Reason.HELD  # A cancelled run holds it until its process stopped.
        else:  # Failed, retrying, timed out, or cancelled and let go.
            reason = Reason.FAILED
        finished_at = None if row.finished_at is None else as_utc(row.finished_at)
        return Refusal(
            new.job,
            new.window,
            reason,
            held_window=row.window,
            owner=row.owner,
            status=row.status,
            expires_at=as_utc(row.expires_at),
            finished_at=finished_at,
        )

    def _skip(self, cursor: CursorWrapper, refusal: Refusal) -> Refusal:
        """Record that this instance stepped aside, in one INSERT.

        The claim rows decided; a skip row is a note for operators, never
        worth failing the claim for. On SQLite a holder whose job keeps a
        write transaction open makes the INSERT give up after the busy
        timeout: the skip is logged, not recorded, and stays a skip.
        """
        new = self.run
        try:
            with self._savepoint_if_in_transaction():
                self.statements.skip(cursor, new, refusal.reason)
        except DatabaseError as error:
            events.skip_not_recorded(new.job, new.window, refusal.reason, error)
        events.skipped(type(new), refusal)
        return refusal

    def _take(self, cursor: CursorWrapper, seen: list[Rival]) -> Taken | None:
        """Insert the window's first claim, or take over the rows in its way."""
        if not seen:
            # The window's first claim: there is no row to lock yet, so the
            # unique constraints settle a race between instances.
            assert self.lease is not None
            with self._savepoint_if_in_transaction():
                self.statements.insert(cursor, self.run, self.lease)
            return self.run, None
        return self._take_over(cursor, seen)

    def _take_over(self, cursor: CursorWrapper, seen: list[Rival]) -> Taken | None:
        """Reassign the window's row, and break dead runs' holds on the job.

        Returns the claimed run and the status its row had before (``None``
        for a new row), or ``None`` when another contender won. Every write is
        a compare-and-set that restates the takeover rule, so a contender that
        read the same rows a moment earlier changes nothing.
        """
        new, lease = self.run, self.lease
        assert lease is not None
        in_db = self._rows()
        free = frees_q(new.window, *self.rule)
        with self._row_lock_transaction():
            # Rows another contender has locked are skipped, not waited for:
            # that contender is settling them right now.
            rows = list(
                in_db.select_for_update(skip_locked=True)
                .filter(self._contested(), free)
                .annotate(db_now=DatabaseNow())
            )
            locked = {row.window for row in rows}
            if new.window not in locked and any(rival.window == new.window for rival in seen):
                return None  # Another contender is taking it over.
            if any(rival.window not in locked for rival in seen):
                # A dead holder read a moment ago is locked by another
                # transaction, most likely a contender clearing it for its
                # own claim. Inserting now would wait on that row while the
                # other waits on ours: a deadlock. Read again once it is done.
                raise _Unsettled(Reason.OVERLAP)
            dead_holders = [row.pk for row in rows if row.window != new.window]
            current = next((row for row in rows if row.window == new.window), None)
            if dead_holders:
                in_db.filter(free, pk__in=dead_holders).update(holds_job=None)
            if current is None:
                self.statements.insert(cursor, new, lease)
                return new, None
            previous_status = current.status
            if not self._reassign(current):
                return None
        return current, previous_status

    def _contested(self) -> Q:
        """The rows that can stand in the way: the window's own and, unless
        overlap is allowed, the job's holder.

        Each branch of the OR searches a whole unique index, (job, window) and
        (job, holds_job), so the read stays an index lookup however many
        finished runs the job has. holds_job is TRUE or NULL: "not NULL" is a
        range an index can search, where SQLite writes "= TRUE" as a bare
        column that it cannot.
        """
        new = self.run
        contested = Q(job=new.job, window=new.window)
        if new.holds_job:
            contested |= Q(job=new.job, holds_job__isnull=False)
        return contested

    def _reassign(self, current: Any) -> bool:
        """Hand ``current`` over to the new run's holder, if no one else did first."""
        new, lease = self.run, self.lease
        assert lease is not None
        changes = {
            "owner": new.owner,
            "token": new.token,
            "status": Status.RUNNING,
            "holds_job": new.holds_job,
            "claimed_at": current.db_now,
            "expires_at": current.db_now + lease,
            "finished_at": None,
            "retry_at": None,
            "error": "",
            "output": None,
        }
        won = (
            self._rows()
            .filter(may_take_over_q(*self.rule), pk=current.pk, token=current.token)
            .update(attempt=F("attempt") + 1, **changes)
        )
        if not won:
            return False
        for name, value in changes.items():
            setattr(current, name, value)
        current.attempt += 1
        return True

    def _savepoint_if_in_transaction(self) -> AbstractContextManager[object]:
        """Keep a conflicting INSERT from breaking the caller's transaction.

        Outside any transaction a lone INSERT is atomic already, and wrapping
        it in one would cost two more round trips (BEGIN, COMMIT) on every
        claim, and make the losers of a race wait that much longer on the
        winner's row.
        """
        if self.connection.in_atomic_block:
            return transaction.atomic(using=self.db)
        return nullcontext()

    def _row_lock_transaction(self) -> AbstractContextManager[object]:
        """A transaction to hold row locks in, where the database has row locks.

        SQLite has none: it ignores FOR UPDATE, and a transaction that reads
        and then writes fails at once with "database is locked" when another
        process wrote first. There each statement commits on its own, and the
        compare-and-set conditions on every write keep the claim exact.
        """
        if self.connection.features.has_select_for_update:
            return transaction.atomic(using=self.db)
        return nullcontext()

    # Holding it.

    def release(self, status: str, error: str, output: str | None = None) -> bool:
        """Record how the run ended, and what it printed, and let the job's
        next run in; ``False``, writing nothing, when the claim is no longer
        the run's.

        A deadlock, a lock timeout or a lost connection is tried again, from
        a fresh connection after a lost one, until the outcome is recorded
        or the lease this process knows of is gone (at least
        ``retries.RETRY_FOR``): the outcome of work that ran must not be
        lost to a moment's fault.
        """
        run = self.run
        tries = 0

        def release_once() -> Released:
            nonlocal tries
            tries += 1
            with self.connection.cursor() as cursor:
                released = self.statements.release(cursor, run, status, error, output)
            # A try whose answer was lost may have recorded it already.
            if not released.recorded and tries > 1:
                return Released(self._recorded_as(status))
            return released

        # Until the lease is gone the outcome is still ours to record.
        retry_for = max(retries.RETRY_FOR, leases.held_for(run.held_until))
        released = self._write(f"the {status} outcome", release_once, retry_for)
        if not released.recorded:
            return False
        run.status, run.error, run.output, run.holds_job = status, error, output, None
        if released.finished_at is not None:
            run.finished_at = released.finished_at
            events.finished(run, lambda: released.finished_at)
            return True
        # Set by the database clock: loaded from the row if it is read.
        del run.finished_at
        events.finished(run, self._stored_finished_at)
        return True

    def renew(
        self, lease: datetime.timedelta, until: datetime.datetime | None, unless_renewed: bool
    ) -> bool:
        """Extend the lease to ``lease`` from now, by the database clock, but
        not past ``until``; ``False``, extending nothing, once it has ended,
        or with ``unless_renewed`` once another process renewed it since this
        one last set it (a scheduler's job that adopted the claim)."""
        held = self._held_rows()
        if unless_renewed:
            held = held.filter(expires_at__lte=self.run.expires_at)
        return bool(self._lengthen([self.run], held, lease, until))

    @classmethod
    def renew_together(cls, runs: Sequence[ClaimRow], lease: datetime.timedelta) -> None:
        """``renew()`` each of ``runs`` held in one database, in the
        statements one renewal sends: for the fires a scheduler won
        together and sent to their queue. A run whose lease ended keeps the
        lease it had in memory."""
        if runs:
            first = cls(runs[0])
            held = first._rows().filter(
                token__in=[run.token for run in runs], status=Status.RUNNING
            )
            first._lengthen(runs, held, lease)

    def _lengthen(
        self,
        runs: Sequence[ClaimRow],
        held: QuerySet[Any],
        lease: datetime.timedelta,
        until: datetime.datetime | None = None,
    ) -> Sequence[ClaimRow]:
        """Extend the lease of the ``held`` rows of ``runs`` that have not
        run out, and of those runs in memory: which were extended.

        A read of the clock, then one autocommitted compare-and-set UPDATE:
        no lock outlives the statement, so a renewing process that pauses
        never blocks a takeover. It extends only a lease that has not run
        out, judged by the database clock in that UPDATE: a lease that ended
        (it lapsed, or an operator expired it) is never revived, even before
        another instance takes the window over. ``held_until`` counts the
        new lease from before it was sent.
        """
        sent_at = leases.clock()
        now = retries.retrying(self.connection, lambda: database_now(self.db))
        expires_at = now + lease if until is None else min(now + lease, until)
        running = held.filter(expires_at__gt=DatabaseNow())
        renewed = self._write(
            "the renewal", lambda: running.update(expires_at=expires_at), retries.RETRY_FOR
        )
        if renewed in (0, len(runs)):
            extended = runs[:renewed]
        else:  # Some lease ended meanwhile: which were extended.
            tokens = set(held.filter(expires_at=expires_at).values_list("token", flat=True))
            extended = [run for run in runs if run.token in tokens]
        for run in extended:
            run.expires_at = expires_at
            run.held_until = leases.held_until(sent_at, expires_at - now)
        return extended

    def resume(self, owner: str, lease: datetime.timedelta) -> bool:
        """Take the held run up again under a new token, as ``owner``, its
        lease renewed to ``lease`` from now; ``False``, changing nothing,
        once its token changed or its lease ended.

        For a task queue's retry, which carries the run's token: a broker
        may deliver one message several times at once (Redis hands an
        unacknowledged one out again after its visibility timeout), and
        every copy carries the same token. One compare-and-set UPDATE on
        that token lets the first copy through; the others then find
        another token, as a rival's, and step aside. A try whose answer
        was lost is looked for by its new token, which no one else draws.
        """
        run = self.run
        token = uuid.uuid4()
        sent_at = leases.clock()
        now = retries.retrying(self.connection, lambda: database_now(self.db))
        expires_at = now + lease
        running = self._held_rows().filter(expires_at__gt=DatabaseNow())
        tries = 0

        def resume_once() -> bool:
            nonlocal tries
            tries += 1
            if running.update(token=token, owner=owner, expires_at=expires_at):
                return True
            return tries > 1 and self._rows().filter(pk=run.pk, token=token).exists()

        if not self._write("the resumption", resume_once, retries.RETRY_FOR):
            return False
        run.token, run.owner, run.expires_at = token, owner, expires_at
        run.held_until = leases.held_until(sent_at, expires_at - now)
        return True

    def ensure_held(self) -> None:
        """Raise ``ClaimLost`` unless the run still holds its claim: one indexed read."""
        if not self._held_rows().exists():
            raise ClaimLost(self._lost_message())

    @contextmanager
    def fenced(self) -> Iterator[None]:
        """A transaction whose writes commit only while the claim is held.

        Entering it locks the claim row and checks the token with one UPDATE,
        which also takes SQLite's write lock at once, so no takeover can
        interleave until the block commits or rolls back. Raises ``ClaimLost``
        on entry, writing nothing, if the claim was lost.

        Under REPEATABLE READ or SERIALIZABLE, entering while the heartbeat
        renews the lease ends the transaction with a serialization failure;
        nothing of the block has run then, so it is entered again in a new
        transaction (unless it is nested in one of the caller's).
        """
        waits = retries.pauses() if not self.connection.in_atomic_block else iter(())
        entered = False
        while True:
            try:
                with transaction.atomic(using=self.db):
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

    def _write(self, what: str, statement: Callable[[], _T], retry_for: float) -> _T:
        """Send one compare-and-set write, its standby wait bounded, and send it
        again while the database asks (``retries``), from a fresh connection
        when the last one was lost, for up to ``retry_for`` seconds."""
        waits = retries.pauses(retry_for)
        while True:
            try:
                self.connection.ensure_connection()
                with standby.bounded(self.connection) as watch:
                    result = statement()
                standby.warn_if_not_acknowledged(watch, what, self.run)
                return result
            except DatabaseError as error:
                pause = next(waits, None)
                if (
                    self.connection.in_atomic_block
                    or not retries.is_transient(error)
                    or pause is None
                ):
                    raise
                retries.reconnect_after(self.connection, error)
            time.sleep(pause)

    def _rows(self) -> QuerySet[Any]:
        """The run's table, in the claim's database."""
        model: Any = type(self.run)
        rows: QuerySet[Any] = model._default_manager.using(self.db)
        return rows

    def _held_rows(self) -> QuerySet[Any]:
        """The run's row, as long as the run still holds it."""
        run = self.run
        return self._rows().filter(
            pk=run.pk, token=run.token, status=Status.RUNNING, holds_job=run.holds_job
        )

    def _recorded_as(self, status: str) -> bool:
        """Whether the run's row, still under its token, records ``status``."""
        return self._rows().filter(pk=self.run.pk, token=self.run.token, status=status).exists()

    def _stored_finished_at(self) -> datetime.datetime | None:
        """When the run finished, by the database clock; None once another
        instance took the window over (a forced rerun, the retry of a
        failure) and cleared it."""
        run = self.run
        finished_at: datetime.datetime | None = (
            self._rows()
            .filter(pk=run.pk, token=run.token)
            .values_list("finished_at", flat=True)
            .first()
        )
        run.finished_at = finished_at
        return finished_at

    def _lost_message(self) -> str:
        run = self.run
        return (
            f"{run.job} {run.window} is no longer held by {run.owner}: its "
            "lease ran out and another instance took over"
        )


class _Unsettled(Exception):
    """A row in the claim's way is being written by another transaction."""

    def __init__(self, reason: Reason):
        super().__init__(reason)
        self.reason = reason
