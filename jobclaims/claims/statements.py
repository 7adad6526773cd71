"""The statements every claim sends, written out in each backend's SQL.

Every scheduled run inserts its claim and releases it, on every server, for
the life of a project, and every instance that steps aside reads the rows in
its way and records its skip. Built by the ORM on each call, those
statements cost the client more CPU than the database needs to run them
(docs/performance.md). Written out once per backend, from the models' own
table and column names and the clock of ``DatabaseNow``, they cost what the
driver costs. Everything rarer (takeovers, renewals, fenced blocks, the
admin) goes through the ORM.
"""

from __future__ import annotations

import datetime
import functools
import uuid
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from django.apps import apps
from django.db import DatabaseError, NotSupportedError, OperationalError, connections

from jobclaims.claims.rule import Reason, Status
from jobclaims.clock import SQLITE_FORMAT, as_utc, now_sql, sqlite_stamp

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper
    from django.db.models.base import ModelState


class ClaimRow(Protocol):
    """A ``JobRun``, as the machinery below the models sees it.

    The models send these statements and call the engine, so neither
    imports them: a ``JobRun`` is this, field for field.
    """

    pk: Any
    job: str
    window: str
    schedule: str
    owner: str
    token: uuid.UUID
    status: str
    attempt: int
    holds_job: bool | None
    slot_start: datetime.datetime | None
    slot_end: datetime.datetime | None
    claimed_at: datetime.datetime
    expires_at: datetime.datetime
    finished_at: datetime.datetime | None
    error: str
    held_until: float | None
    _state: ModelState


class Rival(NamedTuple):
    """A row in a claim's way, as the claim's read found it.

    The datetimes are as the driver returned them (text on SQLite): only a
    row that refuses the claim is described, and converted, by the engine.
    """

    window: str
    status: str
    owner: str
    expires_at: Any
    finished_at: Any
    #: Whether its lease had ended, by the database clock, when it was read.
    lapsed: bool


def claim_statements(connection: BaseDatabaseWrapper) -> ClaimStatements:
    """The statements for ``connection``'s database, written on first use."""
    return _written(connection.alias, connection.vendor)


def statements_class(vendor: str) -> type[ClaimStatements]:
    """The statements of the backend ``vendor`` names, as Django names it."""
    try:
        return _BY_VENDOR[vendor]
    except KeyError:
        raise NotSupportedError(
            f"jobclaims keeps claims in PostgreSQL, MariaDB/MySQL or SQLite, not in "
            f"{vendor}; point JOBCLAIMS['DATABASE'] at one of those"
        ) from None


@functools.cache
def _written(alias: str, vendor: str) -> ClaimStatements:
    return statements_class(vendor)(connections[alias])


class ClaimStatements:
    """One backend's claim statements, each a single round trip.

    Written here in the SQL every backend shares; a subclass per backend
    (``connection.vendor``) writes what its database says its own way.
    """

    def __init__(self, connection: BaseDatabaseWrapper):
        # From the app registry: the models' own methods send these
        # statements, so this module does not import them.
        runs = apps.get_model("jobclaims", "JobRun")
        skips = apps.get_model("jobclaims", "JobSkip")
        now = now_sql(connection)
        lease_end = self._lease_end(now)
        self._token = runs._meta.get_field("token")
        run, skip = _Table(connection, runs), _Table(connection, skips)

        written = run.names(
            "job", "window", "schedule", "owner", "token", "holds_job", "slot_start", "slot_end"
        )
        stamped = run.names("status", "attempt", "failures", "error", "claimed_at", "expires_at")
        columns = f"{run} ({written}, {stamped})"
        # A new claim is running; the value is the model's own, not input.
        running = f"'{Status.RUNNING.value}'"
        values = f"%s, %s, %s, %s, %s, %s, %s, %s, {running}, 1, 0, '', {now}, {lease_end}"
        key_and_stamps = run.names("id", "claimed_at", "expires_at")
        returning = f" RETURNING {key_and_stamps}"
        self._insert_unless_taken = self._unless_taken(columns, values, returning)
        self._insert_run = f"INSERT INTO {columns} VALUES ({values})"
        self._insert_run_returning = self._trusted(self._insert_run + returning)
        self._read_back = (
            f"SELECT {key_and_stamps} FROM {run} "
            f"WHERE {run['job']} = %s AND {run['window']} = %s AND {run['token']} = %s"
        )

        described = run.names("window", "status", "owner", "expires_at", "finished_at")
        window_rows = (
            f"SELECT {described}, {run['expires_at']} <= {now} "
            f"FROM {run} WHERE ({run['job']} = %s AND {run['window']} = %s)"
        )
        # Each side of the OR is a lookup on one of the two unique indexes.
        window_and_holder_rows = (
            f"{window_rows} OR ({run['job']} = %s AND {run['holds_job']} IS NOT NULL)"
        )
        self._window_rows = self._causal(window_rows)
        self._window_and_holder_rows = self._causal(window_and_holder_rows)
        skipped = skip.names("job", "window", "owner", "reason", "count", "skipped_at")
        skip_columns = f"{skip} ({skipped})"
        skip_values = f"%s, %s, %s, %s, 1, {now}"
        counted = self._counted_again(skip)
        self._insert_skip = f"INSERT INTO {skip_columns} VALUES ({skip_values}){counted}"
        self._insert_skip_unflushed = self._unflushed(skip_columns, skip_values) + counted
        self._skip_if_blocked = {
            holder: self._skip_if_rows_block(run, skip, now, counted, holder)
            for holder in (True, False)
        }
        self._release = (
            f"UPDATE {run} SET {run['status']} = %s, {run['error']} = %s, "
            f"{run['holds_job']} = NULL, {run['finished_at']} = {now} "
            f"WHERE {run['id']} = %s AND {run['token']} = %s AND {run['status']} = {running}"
        )

    def claim_by_insert(
        self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta
    ) -> bool:
        """Claim with one INSERT, unless a row stands in the way; never wait.

        Most claims are of a window nobody has claimed yet, and this settles
        them in one statement. ``False`` means a row holds the window or the
        job, or another transaction is writing one right now (a first claim,
        a takeover, a fenced block): the caller then reads what has committed
        and decides, rather than wait for that transaction to end.

        Also ``False``, sending nothing, where the INSERT cannot be tried:
        on SQLite (see ``SQLiteStatements``), where an INSERT cannot
        return rows (MySQL), and inside a transaction, to which PostgreSQL's
        lock timeout would last.
        """
        connection = cursor.db
        if (
            self._insert_unless_taken is None
            or not connection.features.can_return_columns_from_insert
            or connection.in_atomic_block
        ):
            return False
        params = self._insert_params(cursor, run, lease)
        try:
            cursor.execute(self._insert_unless_taken, params)
        except OperationalError as error:
            if self._refused_at_once(error):
                return False
            raise
        row = cursor.fetchone()
        if row is None:
            return False
        self._load(cursor, run, row)
        return True

    def rivals(self, cursor: CursorWrapper, run: ClaimRow) -> list[Rival]:
        """The window's row and, unless ``run`` may overlap, the job's holder."""
        if run.holds_job:
            cursor.execute(self._window_and_holder_rows, [run.job, run.window, run.job])
        else:
            cursor.execute(self._window_rows, [run.job, run.window])
        return [
            Rival(window, status, owner, expires_at, finished_at, bool(lapsed))
            for window, status, owner, expires_at, finished_at, lapsed in cursor.fetchall()
        ]

    def insert(self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta) -> None:
        """Insert ``run``, stamped by the database's clock, and load its key
        and stamps; ``IntegrityError`` when a unique constraint is taken."""
        params = self._insert_params(cursor, run, lease)
        if cursor.db.features.can_return_columns_from_insert:
            cursor.execute(self._insert_run_returning, params)
        else:  # MySQL, and SQLite before 3.35: read the row back.
            cursor.execute(self._insert_run, params)
            token = self._token.get_db_prep_value(run.token, cursor.db)
            cursor.execute(self._read_back, [run.job, run.window, token])
        self._load(cursor, run, cursor.fetchone())

    def skip(self, cursor: CursorWrapper, run: ClaimRow, reason: str) -> None:
        """Count that ``run``'s would-be holder stepped aside, and why.

        A skip is a note for operators, not a decision: the claim rows
        decide. Outside a transaction it does not wait for the disk where
        the database allows that per transaction (PostgreSQL), so thirty
        instances stepping aside at once do not queue on each other's
        flushes. A crash of the database server can lose the skips of its
        last moments; never a claim.
        """
        unflushed = not cursor.db.in_atomic_block
        statement = self._insert_skip_unflushed if unflushed else self._insert_skip
        cursor.execute(statement, [run.job, run.window, run.owner, str(reason)])

    def skip_if_blocked(self, cursor: CursorWrapper, run: ClaimRow) -> str | None:
        """Count a skip if a committed row refuses ``run``'s claim, in one
        statement, and return its reason; ``None`` if no row refuses it.

        For a claim that needs only the reason of a refusal, not the row
        (a scheduler that lost a fire): the read that would say who holds
        the window and the skip's own INSERT, in one round trip. Not sent,
        returning ``None``, where it cannot be (see ``_skip_if_rows_block``).
        The rule is ``states.frees`` without ``force``.
        """
        statement = self._skip_if_blocked[bool(run.holds_job)]
        if statement is None or cursor.db.in_atomic_block:
            return None
        job, window = run.job, run.window
        rivals = [job, window, job] if run.holds_job else [job, window]
        cursor.execute(statement, [job, window, run.owner, window, *rivals, window, window, window])
        row = cursor.fetchone()
        return None if row is None else str(row[0])

    def release(self, cursor: CursorWrapper, run: ClaimRow, status: str, error: str) -> bool:
        """End ``run`` with ``status`` if it still holds its claim.

        On Galera the UPDATE may be retried by the server when another
        node's write to the row wins certification; that is right here: it
        returns no rows, so the client is told only the retry's row count,
        and the retry finds the row taken over and changes nothing.
        """
        token = self._token.get_db_prep_value(run.token, cursor.db)
        cursor.execute(self._release, [str(status), error, run.pk, token])
        return bool(cursor.rowcount == 1)

    def _insert_params(
        self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta
    ) -> list[Any]:
        token = self._token.get_db_prep_value(run.token, cursor.db)
        adapt = cursor.db.ops.adapt_datetimefield_value
        slot = [adapt(run.slot_start), adapt(run.slot_end)]
        written = [run.job, run.window, run.schedule, run.owner, token, run.holds_job, *slot]
        return [*written, self._lease_param(lease)]

    def _load(self, cursor: CursorWrapper, run: ClaimRow, row: tuple[Any, ...]) -> None:
        """Give ``run`` the key and clock stamps its INSERT stored."""
        run.pk, claimed_at, expires_at = row
        run.claimed_at, run.expires_at = as_utc(claimed_at), as_utc(expires_at)
        run._state.adding, run._state.db = False, cursor.db.alias

    # What each backend writes its own way.

    def _lease_end(self, now: str) -> str:
        """SQL for ``now`` moved on by a lease, the statement's last parameter."""
        raise NotImplementedError

    def _lease_param(self, lease: datetime.timedelta) -> object:
        """The lease as ``_lease_end()`` takes it."""
        raise NotImplementedError

    def _unless_taken(self, columns: str, values: str, returning: str) -> str | None:
        """An INSERT that does nothing where a unique key is taken, and fails
        at once, rather than wait, where another transaction holds that key;
        None where there is none."""
        return None

    def _refused_at_once(self, error: OperationalError) -> bool:
        """Whether ``error`` is ``_unless_taken()`` refusing to wait."""
        return False

    def _unflushed(self, columns: str, values: str) -> str:
        """An INSERT whose own transaction commits without waiting for the
        disk, where the database allows that per transaction."""
        return f"INSERT INTO {columns} VALUES ({values})"

    def _counted_again(self, skip: _Table) -> str:
        """What makes a skip's INSERT count one more on the row its reason has.

        Each skip of a window for a reason lands on one row, so rows grow
        with windows, not with duplicates. The statement waits only for
        another skip's own statement on that row, never for a claim row.
        """
        count, owner, skipped_at = skip["count"], skip["owner"], skip["skipped_at"]
        key = skip.names("job", "window", "reason")
        return (
            f" ON CONFLICT ({key}) DO UPDATE SET {count} = {skip}.{count} + 1, "
            f"{owner} = EXCLUDED.{owner}, {skipped_at} = EXCLUDED.{skipped_at}"
        )

    def _skips_in_one_statement(self) -> bool:
        """Whether ``skip_if_blocked()`` is sent. Not here: SQLite reads first
        anyway (its INSERT locks the whole file), and a Galera node orders an
        INSERT's read after the cluster's writes only when told for INSERTs too."""
        return False

    def _skip_if_rows_block(
        self, run: _Table, skip: _Table, now: str, counted: str, holder: bool
    ) -> str | None:
        """``skip_if_blocked()``'s statement: the skip's INSERT selecting from
        the rows in the claim's way the one that refuses it, if any, and
        returning the reason; ``None`` where it is not sent."""
        if not self._skips_in_one_statement():
            return None
        w, status, expires = (f"r.{run[name]}" for name in ("window", "status", "expires_at"))
        running, succeeded = f"'{Status.RUNNING.value}'", f"'{Status.SUCCEEDED.value}'"
        rivals = f"(r.{run['job']} = %s AND {w} = %s)"
        if holder:
            rivals += f" OR (r.{run['job']} = %s AND r.{run['holds_job']} IS NOT NULL)"
        # Not states.frees (force aside): the window's live or succeeded
        # row, or another window's live holder.
        blocking = (
            f"({w} = %s AND (({status} = {running} AND {expires} > {now}) "
            f"OR {status} = {succeeded})) OR ({w} <> %s AND {expires} > {now})"
        )
        reason = (
            f"CASE WHEN {w} <> %s THEN '{Reason.OVERLAP.value}' "
            f"WHEN {status} = {succeeded} THEN '{Reason.SUCCEEDED.value}' "
            f"ELSE '{Reason.HELD.value}' END"
        )
        columns = skip.names("job", "window", "owner", "reason", "count", "skipped_at")
        return (
            f"INSERT INTO {skip} ({columns}) SELECT %s, %s, %s, {reason}, 1, {now} "
            f"FROM {run} r{self._unflushed_source()} WHERE ({rivals}) AND ({blocking}) "
            # The window's own row first, as the refusal it would read names.
            f"ORDER BY {w} <> %s LIMIT 1{counted} RETURNING {skip['reason']}"
        )

    def _unflushed_source(self) -> str:
        """A source to join that makes the statement's transaction commit
        without waiting for the disk, where one exists (see ``_unflushed``)."""
        return ""

    def _trusted(self, statement: str) -> str:
        """``statement``, sending its rows only once they are committed for good."""
        return statement

    def _causal(self, statement: str) -> str:
        """``statement``, reading everything committed before it started."""
        return statement


class PostgreSQLStatements(ClaimStatements):
    def _lease_end(self, now: str) -> str:
        return f"{now} + %s"

    def _lease_param(self, lease: datetime.timedelta) -> object:
        return lease

    def _unless_taken(self, columns: str, values: str, returning: str) -> str:
        # The lock timeout is set for this statement's own transaction, and
        # evaluated before the insert checks the keys. 1 ms: 0 turns it off.
        no_wait = "(SELECT set_config('lock_timeout', '1', true)) AS no_wait"
        return (
            f"INSERT INTO {columns} SELECT {values} FROM {no_wait} "
            f"ON CONFLICT DO NOTHING{returning}"
        )

    def _refused_at_once(self, error: OperationalError) -> bool:
        # lock_not_available, from psycopg, then psycopg2.
        cause = error.__cause__
        return (getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)) == "55P03"

    def _unflushed(self, columns: str, values: str) -> str:
        # synchronous_commit can be set for one transaction; set in the
        # statement, outside any transaction, it lasts for that statement.
        return f"INSERT INTO {columns} SELECT {values} FROM {_UNFLUSHED}"

    def _skips_in_one_statement(self) -> bool:
        return True

    def _unflushed_source(self) -> str:
        return f", {_UNFLUSHED}"


_UNFLUSHED = "(SELECT set_config('synchronous_commit', 'off', true)) AS unflushed"


class MySQLStatements(ClaimStatements):
    """MariaDB and MySQL; on a Galera node, statements that make its claims exact."""

    _MICROSECOND = datetime.timedelta(microseconds=1)

    def __init__(self, connection: BaseDatabaseWrapper):
        self._galera = _on_galera(connection)
        self._returns_from_insert = connection.features.can_return_columns_from_insert
        super().__init__(connection)

    def _lease_end(self, now: str) -> str:
        return f"{now} + INTERVAL %s MICROSECOND"

    def _lease_param(self, lease: datetime.timedelta) -> object:
        return lease // self._MICROSECOND

    def _unless_taken(self, columns: str, values: str, returning: str) -> str:
        # MariaDB's per-statement setting; MySQL, which lacks it, also lacks
        # INSERT ... RETURNING, so it never sends this.
        settings = ["innodb_lock_wait_timeout = 0"]
        if self._galera:
            settings.append(_GALERA_NO_RETRY)
        return (
            f"SET STATEMENT {', '.join(settings)} FOR "
            f"INSERT IGNORE INTO {columns} VALUES ({values}){returning}"
        )

    def _refused_at_once(self, error: OperationalError) -> bool:
        # ER_LOCK_WAIT_TIMEOUT; or, on Galera, a write another node's beat
        # in certification, which MariaDB reports as a deadlock (1213):
        # nothing was written, and a causal read finds the winner's row.
        cause = error.__cause__
        code = cause.args[:1] if cause is not None else ()
        return code == (1205,) or (self._galera and code == (1213,))

    def _counted_again(self, skip: _Table) -> str:
        count, owner, skipped_at = skip["count"], skip["owner"], skip["skipped_at"]
        return (
            f" ON DUPLICATE KEY UPDATE {count} = {count} + 1, "
            f"{owner} = VALUES({owner}), {skipped_at} = VALUES({skipped_at})"
        )

    def _skips_in_one_statement(self) -> bool:
        # MySQL has no INSERT ... RETURNING; MariaDB has, since 10.5.
        return not self._galera and self._returns_from_insert

    def _trusted(self, statement: str) -> str:
        return f"SET STATEMENT {_GALERA_NO_RETRY} FOR {statement}" if self._galera else statement

    def _causal(self, statement: str) -> str:
        return f"SET STATEMENT {_GALERA_CAUSAL} FOR {statement}" if self._galera else statement


class SQLiteStatements(ClaimStatements):
    """SQLite: no INSERT that skips a taken key without waiting. There an
    INSERT takes the lock on the whole file even when it inserts nothing, so
    the losers of a race would queue for it one by one, where a read lets
    them through together."""

    def _lease_end(self, now: str) -> str:
        # The lease moves SQLite's 'now' inside STRFTIME, as a modifier.
        return sqlite_stamp(SQLITE_FORMAT.replace("%", "%%"), "%s")

    def _lease_param(self, lease: datetime.timedelta) -> object:
        return f"+{lease.total_seconds():.6f} seconds"


_BY_VENDOR: dict[str, type[ClaimStatements]] = {
    "postgresql": PostgreSQLStatements,
    "mysql": MySQLStatements,
    "sqlite": SQLiteStatements,
}

# Galera: MariaDB whose nodes all take writes, and settle conflicts between
# them when a transaction commits (certification), not with row locks, which
# are local to a node. Two of its defaults break a claim; each statement that
# needs another value sets it for itself, so nothing outlives the statement,
# and nothing of this is sent to a server that does not run Galera.

#: Galera retries an autocommitted statement that lost certification, once
#: by default, after the rows its RETURNING produced were already sent: the
#: client would read a row the retry did not insert. Without the retry the
#: statement fails with error 1213 instead, and nothing is sent.
_GALERA_NO_RETRY = "wsrep_retry_autocommit = 0"

#: A node applies what the others committed a moment later; a read that
#: decides whether to skip or take over first waits until this node has
#: applied everything committed cluster-wide before it started (1: reads).
_GALERA_CAUSAL = "wsrep_sync_wait = 1"


def _on_galera(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection``'s server is a node of a Galera cluster.

    Asked of the server, once per process and database (the statements are
    written once), so a user has nothing to set, and a single server gets
    the statements it always got. Only MariaDB has the per-statement
    settings that make Galera's claims exact.
    """
    if not getattr(connection, "mysql_is_mariadb", False):
        return False
    with connection.cursor() as cursor:
        # One round trip; SHOW VARIABLES, which no server refuses, scans
        # them all.
        try:
            cursor.execute("SELECT @@GLOBAL.wsrep_on")
        except DatabaseError:  # 1193: a MariaDB built without Galera.
            return False
        (on,) = cursor.fetchone()
    return bool(on)


class _Table:
    """A model's table, and its columns by field name, quoted for one backend."""

    def __init__(self, connection: BaseDatabaseWrapper, model: type[Any]):
        self._quote = connection.ops.quote_name
        self._meta = model._meta

    def __str__(self) -> str:
        return self._quote(self._meta.db_table)

    def __getitem__(self, field: str) -> str:
        return self._quote(self._meta.get_field(field).column)

    def names(self, *fields: str) -> str:
        return ", ".join(self[field] for field in fields)
