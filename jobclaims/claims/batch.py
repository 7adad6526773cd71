"""Many fires' claims at one instant, in a constant number of statements.

At a busy instant hundreds of fires come due at once, on every host that
runs the scheduler. Claimed one by one, each costs every host a round trip
or two, and a host that loses a thousand fires spends seconds learning so.
Claimed together, per chunk of ``CHUNK`` fires:

- PostgreSQL: one message inserts each fire nobody holds (``INSERT_MANY``),
  commits, and reads which of them a pause or a success of its slot
  refuses after all (``REFUSED_MANY``); one statement more counts the skips
  of the fires it lost, and says why each was lost
  (``SKIP_IF_BLOCKED_MANY``). A host sends 1 (it won all), or 2.
- SQLite: the insert, whose single statement holds the write lock through
  its checks, so no read follows it; the skips. 1 or 2.
- MariaDB: a read of what refuses the fires before the claim, which its
  insert cannot check (``jobclaims.claims.backends.mysql``); then one
  message with the insert, the skips of the fires it lost and the read
  after its commit (``CLAIM_MANY_THEN_SKIPPED``). 2, won or lost.

The batch adds no rule of its own. It wins a fire only where no row stands
in its way, as a single claim's first INSERT does, and refuses a fire only
where a committed row refuses it by the takeover rule without force. Every
other fire (its row's holder died, it failed, it is paused or its slot ran,
another transaction held its key past the lock wait, the database asked
for another try; on SQLite, still after the batch was tried again for as
long as a single claim tries) comes back as ``None``: the caller claims it alone
(``JobRun.objects.try_claim``), which takes over, or refuses naming the row
or pause, as it always has. A fire refused after its commit is given back
first, as a single claim gives back its own.

The one order every host inserts in (the fires' keys) makes hosts that
meet on a key queue behind each other rather than deadlock; a deadlock
that happens anyway (another index's order) rolls the statement back
whole, and its fires are then claimed alone.
"""

from __future__ import annotations

import datetime
import functools
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import DatabaseError, connections, transaction

from jobclaims.claims import events, naming, retries, standby
from jobclaims.claims.backends import mysql, postgresql, sqlite
from jobclaims.claims.engine import process_owner
from jobclaims.claims.rule import Reason, Refusal, Status
from jobclaims.claims.statements import ClaimRow, claim_statements
from jobclaims.time import leases
from jobclaims.time.clock import as_utc

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

#: Fires per statement, at most: a thousand jobs due at one instant go in
#: one, and a statement rolled back whole is a few milliseconds lost.
CHUNK = 2000

#: Parameters per fire in the largest statement, ``INSERT_MANY``'s rows.
_PARAMS_PER_FIRE = 11

#: How long PostgreSQL's insert waits for a key another transaction is
#: writing: a host's claims commit within milliseconds, so a longer wait is
#: a transaction holding a claim open (``claim()`` inside ``atomic()``), and
#: its fires are better claimed alone, each refusing at once.
LOCK_TIMEOUT = "1s"

Key = tuple[str, str]


class Fire(NamedTuple):
    """One fire to claim with the others due at the same instant
    (``JobRun.objects.try_claim_many()``): what ``try_claim()`` takes for it."""

    #: The job's name, as ``try_claim()``'s ``job``.
    job: str
    #: The fire's window key.
    window: str
    #: How long the claim holds before another instance may take it over.
    lease: datetime.timedelta
    #: Whether a run of another window of the job may run beside it.
    allow_overlap: bool = False
    #: How the job's windows are cut (``Slots.recorded_schedule``), for its slot.
    schedule: str = ""
    #: The schedule's series, the same under any name (``JobSchedule.series``).
    series: str | None = None


Outcome = ClaimRow | Refusal | None


def claim_fires(
    model: type[Any],
    fires: Sequence[Fire],
    db: str,
    owner: str | None = None,
    then: Callable[[ClaimRow], object] | None = None,
) -> list[Outcome]:
    """Claim ``fires``, each at most once: for each, its held run, the
    ``Refusal`` recorded as a skip, or ``None`` to claim it alone.

    Every fire's input is checked first, as ``try_claim()`` checks one, so
    bad input writes nothing. A failed run's window is left alone
    (``take_failed=False``), as a scheduler's look leaves it.

    ``then`` is called with each run won, in the transaction that claims
    it (a task's enqueue, where its queue is in the claims database): the
    claims and what ``then`` writes commit together, or neither does.
    A claim in a transaction cannot be read after its commit; the run's
    own look at the pauses before it starts covers a pause that committed
    meanwhile, as it does for a claim inside the caller's transaction.
    """
    owner = owner or process_owner()
    runs: list[ClaimRow] = [
        model.new_claim(
            fire.job,
            fire.window,
            fire.lease,
            owner=owner,
            allow_overlap=fire.allow_overlap,
            schedule=fire.schedule,
            series=fire.series,
        )
        for fire in fires
    ]
    connection = connections[db]
    outcomes: dict[Key, Outcome] = {}
    if batches(connection):
        leases_of = {(fire.job, fire.window): fire.lease for fire in fires}
        ordered = sorted(runs, key=_key)
        connection.ensure_connection()
        size = _chunk_size(connection)
        for start in range(0, len(ordered), size):
            chunk = ordered[start : start + size]
            outcomes.update(_claim_chunk(model, connection, chunk, leases_of, then))
    return [outcomes.get(_key(run)) for run in runs]


def batches(connection: BaseDatabaseWrapper) -> bool:
    """Whether claims on ``connection`` may go in batches: outside any
    transaction (a statement rolled back whole would take the caller's work
    with it), where an INSERT returns its rows (MariaDB, not MySQL), and not
    on a Galera node, whose conflicts surface at commit, and whose claims
    take the statements written for it, one by one."""
    if connection.in_atomic_block or not connection.features.can_return_columns_from_insert:
        return False
    if connection.vendor == "mysql":
        connection.ensure_connection()
        return not claim_statements(connection).on_galera
    return connection.vendor in _SQL


def _chunk_size(connection: BaseDatabaseWrapper) -> int:
    """``CHUNK``, or fewer where the database takes fewer parameters in one
    statement: SQLite's limit (32,766 since 3.32), not the 999 Django
    assumes of every SQLite for its own bulk writes."""
    if connection.vendor != "sqlite":
        return CHUNK
    limit = 32766 if sqlite3.sqlite_version_info >= (3, 32) else 999
    getlimit = getattr(connection.connection, "getlimit", None)  # Python 3.11+
    if getlimit is not None:
        # Named in sqlite3 from Python 3.11, as getlimit() is.
        limit = getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)  # type: ignore[attr-defined,unused-ignore]
    return min(CHUNK, limit // _PARAMS_PER_FIRE)


def _patience(connection: BaseDatabaseWrapper) -> float:
    """How long a batch statement is tried again while the database asks.

    On SQLite, as long as a single claim is (``retries.RETRY_FOR``): there
    the only such answer is a wait for the file's one write lock that ran
    out, and the fires' single claims would each wait for that same lock,
    a thousand waits for one. Elsewhere not at all: a deadlock, or a lock
    wait on a row a transaction holds open, is settled sooner by claiming
    those fires alone, each refusing at once.
    """
    return retries.RETRY_FOR if connection.vendor == "sqlite" else 0.0


def _key(run: ClaimRow) -> Key:
    return (run.job, run.window)


def _claim_chunk(
    model: type[Any],
    connection: BaseDatabaseWrapper,
    runs: list[ClaimRow],
    leases_of: dict[Key, datetime.timedelta],
    then: Callable[[ClaimRow], object] | None = None,
) -> dict[Key, Outcome]:
    """Claim ``runs`` in one INSERT, then count a skip for each one a
    committed row refused. With ``then``, one transaction holds the claims
    and ``then(run)`` for each run won. Whatever goes wrong leaves every
    fire of the chunk to be claimed alone."""
    sql = _SQL[connection.vendor]
    sent_at = leases.clock()
    insert = _insert if then is None else functools.partial(_insert_then, then=then)
    waits = retries.pauses(_patience(connection))
    while True:
        try:
            trying, (won, refused, skipped) = insert(model, connection, sql, runs, leases_of)
            break
        except _NothingHeld:
            if (pause := next(waits, None)) is None:
                return {}
            time.sleep(pause)
    outcomes: dict[Key, Outcome] = {}
    for run in won:
        if _key(run) not in refused:  # Those are claimed alone next, and refused naming why.
            run.held_until = leases.held_until(sent_at, leases_of[_key(run)])
            events.acquired(run, None)
            outcomes[_key(run)] = run
    lost = [run for run in trying if run.pk is None and _key(run) not in refused]
    if skipped is None:
        skipped = _skips(connection, sql, lost)
    outcomes.update(_refusals(model, skipped, lost))
    return outcomes


def _insert(
    model: type[Any],
    connection: BaseDatabaseWrapper,
    sql: _Statements,
    runs: list[ClaimRow],
    leases_of: dict[Key, datetime.timedelta],
) -> tuple[list[ClaimRow], Inserted]:
    """The runs tried, and what their insert settled; those refused once
    they committed are given back. Autocommitted, its standby wait
    bounded."""
    trying = runs
    try:
        with connection.cursor() as cursor:
            trying = sql.not_refused_before(cursor, runs)
            with standby.bounded(connection) as watch:
                inserted = sql.insert(cursor, trying, leases_of)
            if watch.fired:
                raise _Unacknowledged
    except (DatabaseError, _Unacknowledged) as error:
        # Nothing written, or (a lost connection, a commit no standby
        # acknowledged) perhaps all of it: whatever committed is given back.
        if isinstance(error, DatabaseError):
            if not retries.is_transient(error):
                raise
            retries.reconnect_after(connection, error)
        if connection.vendor != "sqlite":  # There the insert is one statement: it failed whole.
            _give_back(model, connection, trying)
        raise _NothingHeld from error
    _give_back(model, connection, [run for run in inserted.won if _key(run) in inserted.refused])
    return trying, inserted


def _insert_then(
    model: type[Any],
    connection: BaseDatabaseWrapper,
    sql: _Statements,
    runs: list[ClaimRow],
    leases_of: dict[Key, datetime.timedelta],
    then: Callable[[ClaimRow], object],
) -> tuple[list[ClaimRow], Inserted]:
    """``_insert()`` in one transaction with ``then(run)`` for each run
    won and not refused. A database error rolls back the claims and what
    ``then`` wrote."""
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            trying = sql.not_refused_before(cursor, runs)
            inserted = sql.insert(cursor, trying, leases_of)
            won, refused = inserted.won, inserted.refused
            if given_back := [run for run in won if _key(run) in refused]:
                tokens = [run.token for run in given_back]
                model.objects.using(connection.alias).filter(token__in=tokens).delete()
            for run in won:
                if _key(run) not in refused:
                    then(run)
    except DatabaseError as error:
        if not retries.is_transient(error):
            raise
        retries.reconnect_after(connection, error)
        for run in runs:
            run.pk = None
        raise _NothingHeld from error
    for run in given_back:
        run.pk = None
    return trying, inserted


def _skips(
    connection: BaseDatabaseWrapper, sql: _Statements, lost: list[ClaimRow]
) -> dict[Key, str]:
    """Count a skip for each of the fires another holder's row refuses:
    their reasons. A skip is a note for operators, so when its statement
    fails the fires are claimed alone, which records their own."""
    if not lost:
        return {}

    def count() -> dict[Key, str]:
        with connection.cursor() as cursor:
            return sql.skip_if_blocked(cursor, lost)

    try:
        return retries.retrying(connection, count, _patience(connection))
    except DatabaseError as error:
        if not retries.is_transient(error):
            raise
        retries.reconnect_after(connection, error)
        return {}


def _refusals(
    model: type[Any], skipped: dict[Key, str], lost: list[ClaimRow]
) -> dict[Key, Outcome]:
    """The refusals of the fires lost whose skips were counted, each said."""
    refusals: dict[Key, Outcome] = {}
    for key in map(_key, lost):
        if (reason := skipped.get(key)) is not None:
            refusal = Refusal(*key, Reason(reason))
            events.skipped(model, refusal)
            refusals[key] = refusal
    return refusals


def _give_back(model: type[Any], connection: BaseDatabaseWrapper, runs: list[ClaimRow]) -> None:
    """Delete the rows these new runs' tokens committed, before any of them
    started: each fire is then claimed alone. Best effort, as a new row's
    give-back is: a row left behind is a holder that never started, whose
    lease runs out and whose fire is taken over."""
    if not runs:
        return
    tokens = [run.token for run in runs]
    with suppress(DatabaseError), transaction.atomic(using=connection.alias):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                # This transaction alone waits for no standby.
                cursor.execute("SET LOCAL synchronous_commit = local")
        model.objects.using(connection.alias).filter(
            token__in=tokens, status=Status.RUNNING
        ).delete()
    for run in runs:
        run.pk = None


class Inserted(NamedTuple):
    """What one batch insert settled: the runs it won, loaded; the keys of
    those refused once they committed; and the reasons of the skips it
    counted for the runs it lost, or ``None`` where it counted none."""

    won: list[ClaimRow]
    refused: set[Key]
    skipped: dict[Key, str] | None = None


class _NothingHeld(Exception):
    """A chunk's claims were rolled back or given back: each fire is claimed alone."""


class _Unacknowledged(Exception):
    """The insert's commit waited for a synchronous standby past
    ``STANDBY_TIMEOUT``, and was cancelled (``jobclaims.claims.standby``)."""


class _Statements:
    """One backend's batch statements: ``module`` writes them."""

    def __init__(self, module: Any, *, checks_in_insert: bool, reads_after_commit: bool):
        self.module = module
        self.checks_in_insert = checks_in_insert
        self.reads_after_commit = reads_after_commit

    def not_refused_before(self, cursor: CursorWrapper, runs: list[ClaimRow]) -> list[ClaimRow]:
        """``runs`` less those a pause or a held or succeeded run of their
        slot refuses, read before the claim where the insert cannot check them."""
        if self.checks_in_insert or not runs:
            return runs
        refused = self._refused(cursor, runs, self.module.HELD)
        return [run for run in runs if _key(run) not in refused]

    def insert(
        self,
        cursor: CursorWrapper,
        runs: list[ClaimRow],
        leases_of: dict[Key, datetime.timedelta],
    ) -> Inserted:
        """Insert the runs nobody holds: the runs inserted, loaded, those of
        them refused once they committed, and, where the insert counted
        them too, the skips of the others."""
        if not runs:
            return Inserted([], set(), {})
        module = self.module
        params: list[Any] = []
        for run in runs:
            params += self._fire_params(cursor, run, leases_of[_key(run)])
        params += self._insert_params()
        fires = ", ".join([module.FIRE] * len(runs))
        if self._claims_then_skips(cursor.db):
            return self._claim_then_skips(cursor, runs, fires, params)
        together = self._claims_then_reads(cursor.db)
        if together:
            keys = ", ".join([module.KEY] * len(runs))
            statement = module.CLAIM_MANY_THEN_REFUSED.format(fires=fires, keys=keys)
            params += [*self._key_params(cursor, runs), naming.ALL_JOBS]
        else:
            statement = module.INSERT_MANY.format(fires=fires)
        cursor.execute(statement, params)
        won = self._load(cursor, runs, cursor.fetchall())
        if together:
            cursor.nextset()  # Past the COMMIT's result, to the read's.
            cursor.nextset()
            refused = {(job, window) for job, window in cursor.fetchall()}
            return Inserted(won, refused & {_key(run) for run in won})
        if not self.reads_after_commit or not won:
            return Inserted(won, set())
        return Inserted(won, self._refused(cursor, won, ""))

    def _claim_then_skips(
        self, cursor: CursorWrapper, runs: list[ClaimRow], fires: str, params: list[Any]
    ) -> Inserted:
        """``insert()`` in one message with the skips of the runs it lost
        and the read after its commit (MariaDB's ``CLAIM_MANY_THEN_SKIPPED``).
        The skips are counted for every run but by its own row, so a run
        inserted counts none."""
        module = self.module
        count = len(runs)
        statement = module.CLAIM_MANY_THEN_SKIPPED.format(
            fires=fires,
            blocked=", ".join([module.BLOCKED_TOKEN] * count),
            keys=", ".join([module.KEY] * count),
        )
        params += self._skip_params(cursor, runs, tokens=True)
        params += [*self._key_params(cursor, runs), naming.ALL_JOBS]
        cursor.execute(statement, params)
        won = self._load(cursor, runs, cursor.fetchall())
        try:
            cursor.nextset()
            skipped = {(job, window): reason for job, window, reason in cursor.fetchall()}
            cursor.nextset()
            refused = {(job, window) for job, window in cursor.fetchall()}
        except DatabaseError as error:
            # The claims committed, and the server ran nothing after the
            # error: the read after the commit alone, the skips by the caller.
            if not retries.is_transient(error):
                raise
            return Inserted(won, self._refused(cursor, won, "") if won else set())
        return Inserted(won, refused & {_key(run) for run in won}, skipped)

    def skip_if_blocked(self, cursor: CursorWrapper, runs: list[ClaimRow]) -> dict[Key, str]:
        """Count a skip for each run a committed row refuses: the reasons."""
        module = self.module
        keys = ", ".join([module.BLOCKED] * len(runs))
        statement = module.SKIP_IF_BLOCKED_MANY.format(keys=keys, token="", theirs="")
        cursor.execute(statement, self._skip_params(cursor, runs))
        return {(job, window): reason for job, window, reason in cursor.fetchall()}

    @staticmethod
    def _skip_params(
        cursor: CursorWrapper, runs: list[ClaimRow], *, tokens: bool = False
    ) -> list[Any]:
        """``SKIP_IF_BLOCKED_MANY``'s parameters: each run's key, and its
        token ``tokens`` asks for; then the owner."""
        params: list[Any] = []
        for run in runs:
            params += [run.job, run.window, run.holds_job]
            if tokens:
                params.append(run._meta.get_field("token").get_db_prep_value(run.token, cursor.db))
        params.append(runs[0].owner)
        return params

    def _refused(self, cursor: CursorWrapper, runs: list[ClaimRow], held: str) -> set[Key]:
        module = self.module
        statement = module.REFUSED_MANY.format(keys=", ".join([module.KEY] * len(runs)), held=held)
        params = [*self._key_params(cursor, runs), naming.ALL_JOBS]
        cursor.execute(statement, params)
        return {(job, window) for job, window in cursor.fetchall()}

    def _claims_then_skips(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether the insert, the skips and the read after its commit go in
        one message: where the backend writes them so (MariaDB) and a single
        claim's insert and read go in one (``claims_then_reads()``)."""
        written = getattr(self.module, "CLAIM_MANY_THEN_SKIPPED", None)
        return written is not None and claim_statements(connection).claims_then_reads(connection)

    def _claims_then_reads(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether the insert and the read after its commit go in one
        message: where a single claim's do (``claims_then_reads()``)."""
        written = getattr(self.module, "CLAIM_MANY_THEN_REFUSED", None)
        return written is not None and claim_statements(connection).claims_then_reads(connection)

    def _fire_params(
        self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta
    ) -> list[Any]:
        adapt = cursor.db.ops.adapt_datetimefield_value
        token = run._meta.get_field("token").get_db_prep_value(run.token, cursor.db)
        params = [
            run.job,
            run.window,
            run.schedule,
            run.owner,
            token,
            run.holds_job,
            adapt(run.slot_start),
            adapt(run.slot_end),
            run.series,
            self.module.lease(lease),
        ]
        if self.checks_in_insert:
            params.append(naming.pausing_jobs(run.job)["parent_job"])
        return params

    def _insert_params(self) -> list[Any]:
        """The insert's parameters after its rows."""
        if not self.checks_in_insert:
            return []
        if self.module is postgresql:
            return [LOCK_TIMEOUT, naming.ALL_JOBS]
        return [naming.ALL_JOBS]

    def _key_params(self, cursor: CursorWrapper, runs: Iterable[ClaimRow]) -> list[Any]:
        adapt = cursor.db.ops.adapt_datetimefield_value
        params: list[Any] = []
        for run in runs:
            parent = naming.pausing_jobs(run.job)["parent_job"]
            params += [run.job, run.window, adapt(run.slot_start), adapt(run.slot_end), parent]
        return params

    def _load(
        self, cursor: CursorWrapper, runs: list[ClaimRow], rows: list[tuple[Any, ...]]
    ) -> list[ClaimRow]:
        """Give each run inserted the key and clock stamps its row stored."""
        by_key = {_key(run): run for run in runs}
        won = []
        for pk, job, window, claimed_at, expires_at in rows:
            run = by_key[(job, window)]
            run.pk = pk
            run.claimed_at, run.expires_at = as_utc(claimed_at), as_utc(expires_at)
            run._state.adding, run._state.db = False, cursor.db.alias
            won.append(run)
        return won


_SQL = {
    "postgresql": _Statements(postgresql, checks_in_insert=True, reads_after_commit=True),
    "sqlite": _Statements(sqlite, checks_in_insert=True, reads_after_commit=False),
    "mysql": _Statements(mysql, checks_in_insert=False, reads_after_commit=True),
}
