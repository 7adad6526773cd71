"""The claim engine: how a claim is taken past the rows in its way, or refused.

``JobRun.objects.claim()`` builds the new row and hands it here. Most claims
are settled by one INSERT; a claim that meets rows reads them once, judges
them by the takeover rule (``jobclaims.claims.rule``), and either takes them over
with compare-and-set writes or steps aside, saying which row refused it.

The unique constraints are the real guarantee; row locks, where the
database has them, make contenders skip instead of wait.
"""

from __future__ import annotations

import datetime
import os
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.models import F, Manager, Q

from jobclaims import events, leases, retries, slots, standby
from jobclaims.claims.rule import Reason, Refusal, Status, frees, frees_q, may_take_over_q
from jobclaims.clock import DatabaseNow, as_utc
from jobclaims.sql import ClaimRow, Rival, claim_statements

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper


class Takeover(NamedTuple):
    """Which rows a claim may take over, as ``rule.may_take_over`` takes it."""

    force: bool
    take_failed: bool = True


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


os.register_at_fork(after_in_child=_draw_again)


def process_owner() -> str:
    """The name a claim records for its holder: ``host:pid:random-id``."""
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{_PROCESS_ID}"


def claim(
    runs: Manager[Any],
    db: str,
    new: ClaimRow,
    lease: datetime.timedelta,
    force: bool,
    details: bool = True,
    take_failed: bool = True,
) -> ClaimRow | Refusal:
    """Claim ``new``'s window in the database ``db``.

    Returns ``new``, or the window's row that it took over, as stored; or
    the ``Refusal`` that was recorded as a skip. Without ``details`` the
    refusal may name only its reason, not the row that refused the claim,
    which saves the loser of a race one statement. Without ``take_failed``
    a failed or retrying row refuses the claim (``rule.may_take_over``).

    The run's ``held_until`` says until when its lease is surely held: the
    lease counts from before the first statement was sent, however long the
    commit took to return (``leases.held_until()``). A connection lost on
    the way is opened again and the claim tried again within the same
    budget (``retries.pauses()``), first looking for its own token: the
    lost try may have committed.
    """
    sent_at = leases.clock()
    connection = connections[db]
    rule = Takeover(force, take_failed)
    waits = retries.pauses()
    maybe_committed = False
    while True:
        try:
            outcome = _claim_bounded(
                runs, connection, new, lease, rule, details, waits, maybe_committed
            )
            break
        except DatabaseError as error:
            pause = next(waits, None)
            # A cancel meant for an earlier statement (its watch did not
            # fire here, or StandbyTimeout was raised) wrote nothing.
            again = retries.is_disconnect(error) or retries.is_cancelled(error)
            if connection.in_atomic_block or not again or pause is None:
                raise
            retries.reconnect_after(connection, error)
            maybe_committed = True
        time.sleep(pause)
    if isinstance(outcome, Refusal):
        return outcome
    run, previous_status = outcome
    if previous_status is None and not force and (refusal := _slot_refusal(runs, db, run)):
        return _give_back(runs, db, run, refusal)
    run.held_until = leases.held_until(sent_at, lease)
    events.acquired(run, previous_status)
    return run


def _claim_bounded(
    runs: Manager[Any],
    connection: BaseDatabaseWrapper,
    new: ClaimRow,
    lease: datetime.timedelta,
    rule: Takeover,
    details: bool,
    waits: Iterator[float],
    maybe_committed: bool,
) -> Taken | Refusal:
    """One connection's try at the claim, its commit bounded by STANDBY_TIMEOUT."""
    job, window = new.job, new.window
    connection.ensure_connection()
    if not rule.force and (refusal := _slot_refusal(runs, connection.alias, new, held=True)):
        with connection.cursor() as cursor:
            return _skip(runs, cursor, new, refusal)
    # A commit may wait for a synchronous standby; never forever.
    with standby.bounded(connection) as watch:
        try:
            mine = _own_claim(runs, connection, new) if maybe_committed else None
            if mine is not None:
                outcome: Taken | Refusal = (mine, None)
            else:
                outcome = _claim_until_settled(runs, connection, new, lease, rule, details, waits)
        except DatabaseError as error:
            if watch.fired:  # Cancelled before it committed anything.
                raise standby.claim_not_acknowledged(job, window, None) from error
            raise
    if not isinstance(outcome, Refusal) and watch.fired:
        raise standby.claim_not_acknowledged(job, window, outcome[0])
    return outcome


def _own_claim(
    runs: Manager[Any], connection: BaseDatabaseWrapper, new: ClaimRow
) -> ClaimRow | None:
    """The window's row with ``new``'s token, if a try whose answer was lost committed it.

    The token is drawn per claim, so no other instance's row can carry it.
    """
    mine: ClaimRow | None = (
        runs.using(connection.alias)
        .filter(job=new.job, window=new.window, token=new.token, status=Status.RUNNING)
        .first()
    )
    return mine


def _slot_refusal(
    runs: Manager[Any], db: str, new: ClaimRow, *, held: bool = False
) -> Refusal | None:
    """The refusal of a run of another window covering ``new``'s slot
    (``jobclaims.slots``), or None.

    Before the claim, a held run refuses too. After it, only a success
    does: two claims of overlapping slots that met while both were held
    must not both give way. Unless overlap is allowed, the one-holder
    constraint never lets them both hold; with overlap allowed, they both run.
    """
    if new.slot_start is None or new.slot_end is None:
        return None
    found = slots.ran(runs.using(db), new.job, new.window, (new.slot_start, new.slot_end))
    if not held:
        found = found.filter(status=Status.SUCCEEDED)
    row = found.order_by("slot_end").first()
    if row is None:
        return None
    return Refusal(
        new.job,
        new.window,
        Reason.SLOT_RAN,
        held_window=row.window,
        owner=row.owner,
        status=row.status,
        expires_at=row.expires_at,
        finished_at=row.finished_at,
    )


def _give_back(runs: Manager[Any], db: str, run: ClaimRow, refusal: Refusal) -> Refusal:
    """Delete the row just inserted for ``run``: a run covering its slot
    succeeded while it was being claimed (the check before the claim did
    not see it yet)."""
    runs.using(db).filter(pk=run.pk, token=run.token).delete()
    with connections[db].cursor() as cursor:
        return _skip(runs, cursor, run, refusal)


def step_aside(runs: Manager[Any], db: str, new: ClaimRow, refusal: Refusal) -> Refusal:
    """Record a refusal decided before any claim row was read, such as a
    paused job's, as the engine records its own: a skip row and a signal."""
    connection = connections[db]
    connection.ensure_connection()
    with connection.cursor() as cursor:
        return _skip(runs, cursor, new, refusal)


def _claim_until_settled(
    runs: Manager[Any],
    connection: BaseDatabaseWrapper,
    new: ClaimRow,
    lease: datetime.timedelta,
    rule: Takeover,
    details: bool,
    waits: Iterator[float],
) -> Taken | Refusal:
    """Claim, starting again while the database asks for another try.

    A deadlock, a serialization failure or a lock timeout ends a claim's
    statement or transaction with nothing written (``retries``), and a
    row in the way that another transaction is writing is not settled
    yet (``_Unsettled``). Neither says who won, so each try starts from
    a fresh read of what has committed: the tries together still give
    one run. Inside the caller's transaction a failed statement may have
    ended that transaction (MariaDB rolls it all back on a deadlock), so
    there the error is raised for the caller to retry the whole of it. A
    lost connection is raised, for ``claim()`` to open a fresh one.
    """
    last: Exception
    while True:
        try:
            with connection.cursor() as cursor:
                return _claim_once(runs, cursor, new, lease, rule, details)
        except _Unsettled as unsettled:
            last = unsettled
        except DatabaseError as error:
            if (
                connection.in_atomic_block
                or not retries.is_transient(error)
                or retries.is_disconnect(error)
            ):
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
            return _skip(runs, cursor, new, Refusal(new.job, new.window, last.reason))
    raise last


def _claim_once(
    runs: Manager[Any],
    cursor: CursorWrapper,
    new: ClaimRow,
    lease: datetime.timedelta,
    rule: Takeover,
    details: bool,
) -> Taken | Refusal:
    statements = claim_statements(cursor.db)
    if statements.claim_by_insert(cursor, new, lease):
        return new, None
    if not details and not rule.force and (reason := statements.skip_if_blocked(cursor, new)):
        # The INSERT met a row, and the skip found it refusing: two
        # statements for a loser that needs no more than the reason.
        refusal = Refusal(new.job, new.window, Reason(reason))
        events.skipped(runs.model, refusal)
        return refusal
    return _contend(runs, cursor, new, lease, rule)


def _contend(
    runs: Manager[Any],
    cursor: CursorWrapper,
    new: ClaimRow,
    lease: datetime.timedelta,
    rule: Takeover,
) -> Taken | Refusal:
    """Claim past the rows in the way, or record a skip and return why.

    A plain read first: it never waits on a lock, and most refusals (the
    window is held or done) end here, touching no claim row.
    """
    seen = claim_statements(cursor.db).rivals(cursor, new)
    blocking = [
        row for row in seen if not frees(row.window, row.status, row.lapsed, new.window, *rule)
    ]
    if blocking:
        return _skip(runs, cursor, new, _refusal(new, blocking))
    try:
        taken = _take(runs, cursor, new, seen, lease, rule)
    except IntegrityError:
        # Another instance inserted first: the constraint decided.
        taken = None
    if taken is None:
        return _skip(runs, cursor, new, Refusal(new.job, new.window, Reason.HELD))
    return taken


def _refusal(new: ClaimRow, blocking: list[Rival]) -> Refusal:
    """Why the rows in the way refuse the claim: the window's own row first."""
    row = min(blocking, key=lambda rival: rival.window != new.window)
    if row.window != new.window:
        reason = Reason.OVERLAP
    elif row.status == Status.SUCCEEDED:
        reason = Reason.SUCCEEDED
    elif row.status != Status.RUNNING:  # Failed, retrying, timed out or cancelled.
        reason = Reason.FAILED
    else:
        reason = Reason.HELD
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


def _skip(runs: Manager[Any], cursor: CursorWrapper, new: ClaimRow, refusal: Refusal) -> Refusal:
    """Record that this instance stepped aside, in one INSERT.

    The claim rows decided; a skip row is a note for operators, never
    worth failing the claim for. On SQLite a holder whose job keeps a
    write transaction open makes the INSERT give up after the busy
    timeout: the skip is logged, not recorded, and stays a skip.
    """
    try:
        with _savepoint_if_in_transaction(cursor.db.alias):
            claim_statements(cursor.db).skip(cursor, new, refusal.reason)
    except DatabaseError as error:
        events.skip_not_recorded(new.job, new.window, refusal.reason, error)
    events.skipped(runs.model, refusal)
    return refusal


def _take(
    runs: Manager[Any],
    cursor: CursorWrapper,
    new: ClaimRow,
    seen: list[Rival],
    lease: datetime.timedelta,
    rule: Takeover,
) -> Taken | None:
    """Insert the window's first claim, or take over the rows in its way."""
    if not seen:
        # The window's first claim: there is no row to lock yet, so the
        # unique constraints settle a race between instances.
        with _savepoint_if_in_transaction(cursor.db.alias):
            claim_statements(cursor.db).insert(cursor, new, lease)
        return new, None
    return _take_over(runs, cursor, new, seen, lease, rule)


def _take_over(
    runs: Manager[Any],
    cursor: CursorWrapper,
    new: ClaimRow,
    seen: list[Rival],
    lease: datetime.timedelta,
    rule: Takeover,
) -> Taken | None:
    """Reassign the window's row, and break dead runs' holds on the job.

    Returns the claimed run and the status its row had before (``None``
    for a new row), or ``None`` when another contender won. Every write is
    a compare-and-set that restates the takeover rule, so a contender that
    read the same rows a moment earlier changes nothing.
    """
    db = cursor.db.alias
    in_db = runs.using(db)
    free = frees_q(new.window, *rule)
    with _row_lock_transaction(db):
        # Rows another contender has locked are skipped, not waited for:
        # that contender is settling them right now.
        rows = list(
            in_db.select_for_update(skip_locked=True)
            .filter(_contested(new), free)
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
            claim_statements(cursor.db).insert(cursor, new, lease)
            return new, None
        previous_status = current.status
        if not _reassign(in_db, current, new, lease, rule):
            return None
    return current, previous_status


def _contested(new: ClaimRow) -> Q:
    """The rows that can stand in the way: the window's own and, unless
    overlap is allowed, the job's holder.

    Each branch of the OR searches a whole unique index, (job, window) and
    (job, holds_job), so the read stays an index lookup however many
    finished runs the job has. holds_job is TRUE or NULL: "not NULL" is a
    range an index can search, where SQLite writes "= TRUE" as a bare
    column that it cannot.
    """
    contested = Q(job=new.job, window=new.window)
    if new.holds_job:
        contested |= Q(job=new.job, holds_job__isnull=False)
    return contested


def _reassign(
    in_db: Any, current: Any, new: ClaimRow, lease: datetime.timedelta, rule: Takeover
) -> bool:
    """Hand ``current`` over to ``new``'s holder, if no one else did first."""
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
    }
    won = in_db.filter(may_take_over_q(*rule), pk=current.pk, token=current.token).update(
        attempt=F("attempt") + 1, **changes
    )
    if not won:
        return False
    for name, value in changes.items():
        setattr(current, name, value)
    current.attempt += 1
    return True


class _Unsettled(Exception):
    """A row in the claim's way is being written by another transaction."""

    def __init__(self, reason: Reason):
        super().__init__(reason)
        self.reason = reason


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
