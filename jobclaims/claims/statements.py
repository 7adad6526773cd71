"""The statements every claim sends, and which backend's a database gets.

Every scheduled run inserts its claim and releases it, on every server, for
the life of a project, and every instance that steps aside reads the rows in
its way and records its skip. Built by the ORM on each call, those
statements cost the client more CPU than the database needs to run them
(docs/performance.md). Written whole once per backend (``postgresql``,
``mysql``, ``sqlite``), with named parameters, they cost what the driver
costs. Everything rarer (takeovers, renewals, fenced blocks, the admin) goes
through the ORM.
"""

from __future__ import annotations

import datetime
import functools
import uuid
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

from django.db import NotSupportedError, OperationalError, connections

from jobclaims.claims import naming
from jobclaims.claims.backends import mysql, postgresql, sqlite
from jobclaims.claims.rule import PauseNote
from jobclaims.time.clock import as_utc

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
    series: str | None
    claimed_at: datetime.datetime
    expires_at: datetime.datetime
    finished_at: datetime.datetime | None
    error: str
    output: str | None
    held_until: float | None
    unpaused_at: float | None
    _state: ModelState
    _meta: ClassVar[Any]


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
    """The statements for ``connection``'s database, chosen on first use."""
    return _chosen(connection.alias, connection.vendor)


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
def _chosen(alias: str, vendor: str) -> ClaimStatements:
    return statements_class(vendor)(connections[alias])


class Released(NamedTuple):
    """What a release did: whether it recorded the outcome (the run still
    held its claim), and the finish time the database's clock gave it, where
    the statement returns it (None: read it back if it is wanted)."""

    recorded: bool
    finished_at: datetime.datetime | None = None


class Written(NamedTuple):
    """One backend's statements, as its module writes them; None: not sent there."""

    insert: str
    #: None where an INSERT cannot return rows: ``insert`` then ``read_back``.
    insert_returning: str | None
    read_back: str
    window_rows: str
    window_and_holder_rows: str
    skip: str
    #: ``skip``, not waiting for the disk, for a skip outside any transaction.
    skip_unflushed: str
    release: str
    pause: str
    #: ``pause``, and the runs covering a claim's slot that refuse it.
    pause_or_slot_run: str
    #: ``pause``, and the runs covering a claim's slot that succeeded: read
    #: after its commit.
    pause_or_slot_succeeded: str
    #: A claim that never waits, where the database has one.
    insert_unless_taken: str | None = None
    #: Whether ``insert_unless_taken`` inserts nothing where ``pause_or_slot_run``
    #: would find a refusal: a paused job, a held or succeeded run of the slot.
    insert_checks_refusals: bool = False
    #: The read of the rows in the way and the skip's INSERT in one statement.
    skip_if_blocked: str | None = None
    skip_if_window_blocked: str | None = None
    #: ``insert_unless_taken``, committed, then ``pause`` (or
    #: ``pause_or_slot_succeeded``), in one call of a procedure.
    claim_then_pause: str | None = None
    claim_then_pause_or_slot_succeeded: str | None = None


class ClaimedThenRead(NamedTuple):
    """What ``claim_then_read()`` did: whether it inserted the claim, and if
    so what its read after the commit found refusing it (None: nothing)."""

    inserted: bool
    refusing: PauseNote | Rival | None = None


class ClaimStatements:
    """Sends one backend's statements, each a single round trip."""

    #: Whether the server is a node of a Galera cluster (MariaDB's only).
    on_galera = False

    def __init__(self, connection: BaseDatabaseWrapper):
        written = self._written(connection)
        # As logged and captured: without the blank lines around the text.
        self.sql = Written._make(
            sql.strip() if isinstance(sql, str) and sql else sql for sql in written
        )

    def _written(self, connection: BaseDatabaseWrapper) -> Written:
        raise NotImplementedError

    def claim_by_insert(
        self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta
    ) -> bool:
        """Claim with one INSERT, unless the job is paused or a row stands
        in the way; never wait.

        Most claims are of a window nobody has claimed yet, of a job nobody
        paused, and this settles them in one statement. ``False`` means the
        job is paused, a row holds the window or the job, or another
        transaction is writing one right now (a first claim, a takeover, a
        fenced block): the caller then reads what has committed and decides,
        rather than wait for that transaction to end. Also ``False``, sending
        nothing, where the INSERT cannot be tried (``claims_by_insert()``).
        """
        statement = self.sql.insert_unless_taken
        if statement is None or not self.claims_by_insert(cursor.db):
            return False
        try:
            cursor.execute(statement, self._run_params(cursor, run, lease))
        except OperationalError as error:
            if self._refused_at_once(error.__cause__):
                return False
            raise
        row = cursor.fetchone()
        if row is None:
            return False
        self._load(cursor, run, row)
        return True

    def claim_then_read(
        self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta, slotted: bool
    ) -> ClaimedThenRead | None:
        """``claim_by_insert()`` (on MariaDB after a read of what refuses
        it, which its INSERT cannot ask), and once it committed the read
        that refuses a claim after its commit (``pause()``, or with
        ``slotted`` ``pause_or_slot_succeeded()``), in one call of the
        backend's procedure; ``None``, sending nothing, where it is not
        called (``claims_then_reads()``)."""
        if not self.claims_then_reads(cursor.db):
            return None
        sql = self.sql
        statement = sql.claim_then_pause_or_slot_succeeded if slotted else sql.claim_then_pause
        assert statement is not None, "claims_then_reads() said both are written"
        try:
            cursor.execute(statement, self._run_params(cursor, run, lease))
        except OperationalError as error:
            if self._refused_at_once(error.__cause__):
                return ClaimedThenRead(False)
            raise
        return self._claimed_then_read(cursor, run)

    def _claimed_then_read(self, cursor: CursorWrapper, run: ClaimRow) -> ClaimedThenRead:
        """The procedure's one row: the claim's columns, the id NULL where
        it inserted nothing, then what refuses it (NULL: nothing)."""
        claimed_id, claimed_at, expires_at, *refusing = cursor.fetchone()
        if claimed_id is None:
            return ClaimedThenRead(False)
        self._load(cursor, run, (claimed_id, claimed_at, expires_at))
        found = self._pause_or_slot_found([refusing]) if refusing[0] is not None else None
        return ClaimedThenRead(True, found)

    def claims_then_reads(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether ``claim_then_read()`` is sent on ``connection``: where the
        backend writes it, and a claim starts with ``claim_by_insert()``."""
        return self.sql.claim_then_pause is not None and self.claims_by_insert(connection)

    def claims_by_insert(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether a claim on ``connection`` starts with ``claim_by_insert()``:
        not on SQLite (see ``jobclaims.claims.backends.sqlite``), where an INSERT
        cannot return rows (MySQL), nor inside a transaction, to which
        PostgreSQL's lock timeout would last."""
        return (
            self.sql.insert_unless_taken is not None
            and connection.features.can_return_columns_from_insert
            and not connection.in_atomic_block
        )

    def checks_refusals_in_insert(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether the claim's first statement on ``connection`` inserts
        nothing for a paused job or a slot another run covers, so that the
        claim need not read the pauses and the slot's runs first: PostgreSQL's
        ``claim_by_insert()``, and its ``claim_then_read()``."""
        return self.sql.insert_checks_refusals and self.claims_by_insert(connection)

    def rivals(self, cursor: CursorWrapper, run: ClaimRow) -> list[Rival]:
        """The window's row and, unless ``run`` may overlap, the job's holder."""
        statement = self.sql.window_and_holder_rows if run.holds_job else self.sql.window_rows
        cursor.execute(statement, {"job": run.job, "window": run.window})
        return [
            Rival(window, status, owner, expires_at, finished_at, bool(lapsed))
            for window, status, owner, expires_at, finished_at, lapsed in cursor.fetchall()
        ]

    def insert(self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta) -> None:
        """Insert ``run``, stamped by the database's clock, and load its key
        and stamps; ``IntegrityError`` when a unique constraint is taken."""
        params = self._run_params(cursor, run, lease)
        if self.sql.insert_returning and cursor.db.features.can_return_columns_from_insert:
            cursor.execute(self.sql.insert_returning, params)
        else:  # MySQL, and SQLite before 3.35: read the row back.
            cursor.execute(self.sql.insert, params)
            read = {"job": run.job, "window": run.window, "token": params["token"]}
            cursor.execute(self.sql.read_back, read)
        self._load(cursor, run, cursor.fetchone())

    def skip(self, cursor: CursorWrapper, run: ClaimRow, reason: str) -> None:
        """Count that ``run``'s would-be holder stepped aside, and why.

        A skip is a note for operators, not a decision: the claim rows
        decide. Outside a transaction it does not wait for the disk where
        the database allows that per transaction (PostgreSQL).
        """
        unflushed = not cursor.db.in_atomic_block
        statement = self.sql.skip_unflushed if unflushed else self.sql.skip
        params = {"job": run.job, "window": run.window, "owner": run.owner, "reason": str(reason)}
        cursor.execute(statement, params)

    def skip_if_blocked(self, cursor: CursorWrapper, run: ClaimRow) -> str | None:
        """Count a skip if a committed row refuses ``run``'s claim, in one
        statement, and return its reason; ``None`` if no row refuses it.

        For a claim that needs only the reason of a refusal, not the row
        (a scheduler that lost a fire): the read that would say who holds
        the window and the skip's own INSERT, in one round trip. Not sent,
        returning ``None``, where the backend has no such statement, or
        inside a transaction. The rule is ``rule.frees`` without ``force``.
        """
        statement = self.sql.skip_if_blocked if run.holds_job else self.sql.skip_if_window_blocked
        if statement is None or cursor.db.in_atomic_block:
            return None
        params = {"job": run.job, "window": run.window, "owner": run.owner}
        cursor.execute(statement, params)
        row = cursor.fetchone()
        return None if row is None else str(row[0])

    def pause(self, cursor: CursorWrapper, run: ClaimRow) -> PauseNote | None:
        """The newest pause in force of ``run``'s job, which refuses its claim.

        A pause of a job holds for each of its schedules' claims too, and
        a pause of all jobs for every claim (``jobclaims.claims.naming``).
        """
        cursor.execute(self.sql.pause, {"job": run.job, **naming.pausing_jobs(run.job)})
        row = cursor.fetchone()
        return None if row is None else self._pause_note(row)

    def _pause_note(self, row: tuple[Any, ...]) -> PauseNote:
        """The pause a row of ``pause`` describes."""
        by, at, reason, until, job = row
        return PauseNote(by, as_utc(at), reason, None if until is None else as_utc(until), job)

    def pause_or_slot_run(self, cursor: CursorWrapper, run: ClaimRow) -> PauseNote | Rival | None:
        """The newest pause in force of ``run``'s job, else the first run of
        another window covering ``run``'s slot that is held or succeeded:
        what refuses the claim before any claim row is read, in one read.
        ``run`` has a slot."""
        return self._pause_or_slot(cursor, run, self.sql.pause_or_slot_run)

    def pause_or_slot_succeeded(
        self, cursor: CursorWrapper, run: ClaimRow
    ) -> PauseNote | Rival | None:
        """The newest pause in force of ``run``'s job, else the first run of
        another window covering ``run``'s slot that succeeded: what refuses
        a claim after its commit, in one read. ``run`` has a slot."""
        return self._pause_or_slot(cursor, run, self.sql.pause_or_slot_succeeded)

    def _pause_or_slot(
        self, cursor: CursorWrapper, run: ClaimRow, statement: str
    ) -> PauseNote | Rival | None:
        params = {**self._slot_params(cursor, run), **naming.pausing_jobs(run.job)}
        cursor.execute(statement, params)
        return self._pause_or_slot_found(cursor.fetchall())

    def _pause_or_slot_found(self, rows: list[tuple[Any, ...]]) -> PauseNote | Rival | None:
        """The pause, else the slot's run, that rows of ``pause_or_slot_run``
        or ``pause_or_slot_succeeded`` describe."""
        # The fourth column is the paused job of a pause, the status of a run.
        for found, who, said, job, since, until in rows:
            if found == "paused":
                return PauseNote(
                    who, as_utc(since), said, None if until is None else as_utc(until), job
                )
        for _found, window, owner, status, expires_at, finished_at in rows:
            return Rival(window, status, owner, expires_at, finished_at, lapsed=False)
        return None

    def _slot_params(self, cursor: CursorWrapper, run: ClaimRow) -> dict[str, Any]:
        adapt = cursor.db.ops.adapt_datetimefield_value
        return {
            "job": run.job,
            "window": run.window,
            "slot_start": adapt(run.slot_start),
            "slot_end": adapt(run.slot_end),
        }

    def release(
        self,
        cursor: CursorWrapper,
        run: ClaimRow,
        status: str,
        error: str,
        output: str | None = None,
    ) -> Released:
        """End ``run`` with ``status``, and what it printed, if it still holds
        its claim, and say when by the database's clock, in the same round
        trip: the run's duration is counted (metrics, the log) without a read."""
        token = run._meta.get_field("token").get_db_prep_value(run.token, cursor.db)
        params = {
            "status": str(status),
            "error": error,
            "output": output,
            "id": run.pk,
            "token": token,
        }
        cursor.execute(self.sql.release, params)
        return self._released(cursor)

    def _released(self, cursor: CursorWrapper) -> Released:
        """What ``release``'s statement did, from the row it returns."""
        row = cursor.fetchone()
        return Released(False) if row is None else Released(True, as_utc(row[0]))

    def _run_params(
        self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta
    ) -> dict[str, Any]:
        adapt = cursor.db.ops.adapt_datetimefield_value
        return {
            "job": run.job,
            "window": run.window,
            "schedule": run.schedule,
            "owner": run.owner,
            "token": run._meta.get_field("token").get_db_prep_value(run.token, cursor.db),
            "holds_job": run.holds_job,
            "slot_start": adapt(run.slot_start),
            "slot_end": adapt(run.slot_end),
            "series": run.series,
            "lease": self._lease(lease),
        }

    def _load(self, cursor: CursorWrapper, run: ClaimRow, row: tuple[Any, ...]) -> None:
        """Give ``run`` the key and clock stamps its INSERT stored."""
        run.pk, claimed_at, expires_at = row
        run.claimed_at, run.expires_at = as_utc(claimed_at), as_utc(expires_at)
        run._state.adding, run._state.db = False, cursor.db.alias

    def _lease(self, lease: datetime.timedelta) -> object:
        raise NotImplementedError

    def _refused_at_once(self, cause: BaseException | None) -> bool:
        """Whether ``cause`` is ``insert_unless_taken`` refusing to wait."""
        return False


class PostgreSQLStatements(ClaimStatements):
    def _run_params(
        self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta
    ) -> dict[str, Any]:
        # The jobs whose pause holds for this claim too, for CLAIM and its read.
        return {**super()._run_params(cursor, run, lease), **naming.pausing_jobs(run.job)}

    def _written(self, connection: BaseDatabaseWrapper) -> Written:
        sql = postgresql
        return Written(
            insert=sql.INSERT,
            insert_returning=sql.INSERT_RETURNING,
            read_back=sql.READ_BACK,
            window_rows=sql.WINDOW_ROWS,
            window_and_holder_rows=sql.WINDOW_AND_HOLDER_ROWS,
            skip=sql.SKIP,
            skip_unflushed=sql.SKIP_UNFLUSHED,
            release=sql.RELEASE,
            pause=sql.PAUSE,
            pause_or_slot_run=sql.PAUSE_OR_SLOT_RUN,
            pause_or_slot_succeeded=sql.PAUSE_OR_SLOT_SUCCEEDED,
            insert_unless_taken=sql.CLAIM,
            insert_checks_refusals=True,
            skip_if_blocked=sql.SKIP_IF_BLOCKED,
            skip_if_window_blocked=sql.SKIP_IF_WINDOW_BLOCKED,
            claim_then_pause=sql.CLAIM_THEN_PAUSE,
            claim_then_pause_or_slot_succeeded=sql.CLAIM_THEN_PAUSE_OR_SLOT_SUCCEEDED,
        )

    def claims_then_reads(self, connection: BaseDatabaseWrapper) -> bool:
        """Only through psycopg 3's client-side binding (Django's default).
        The claim's procedure would take any binding, but the scheduler's
        batch asks this too (``jobclaims.claims.batch``), and sends its
        claims and their read in one message, which only that binding sends
        in the simple query protocol, keeping each statement's result:
        psycopg2 keeps the last alone, and server-side binding prepares one
        statement at a time."""
        options = connection.settings_dict["OPTIONS"]
        # Django's PostgreSQL backend names its driver's module "Database".
        driver = getattr(connection, "Database", None)
        return (
            super().claims_then_reads(connection)
            and getattr(driver, "__name__", None) == "psycopg"
            and options.get("server_side_binding") is not True
        )

    def _lease(self, lease: datetime.timedelta) -> object:
        return postgresql.lease(lease)

    def _refused_at_once(self, cause: BaseException | None) -> bool:
        return postgresql.refused_at_once(cause)


class MySQLStatements(ClaimStatements):
    """MariaDB and MySQL; on a Galera node, the statements that make its claims exact."""

    def _written(self, connection: BaseDatabaseWrapper) -> Written:
        sql = mysql
        self.on_galera = galera = mysql.on_galera(connection)
        # MySQL has no INSERT ... RETURNING; MariaDB has, since 10.5.
        returns = connection.features.can_return_columns_from_insert
        # On Galera, the same statements, each run with the setting it needs.
        trusted = sql.INSERT_RETURNING.strip()
        if galera:
            trusted = sql.GALERA_NO_RETRY + trusted
        causal = sql.GALERA_CAUSAL if galera else ""
        mariadb_alone = returns and not galera  # MariaDB 10.5+, not a Galera node.
        return Written(
            insert=sql.INSERT,
            insert_returning=trusted,
            read_back=sql.READ_BACK,
            window_rows=causal + sql.WINDOW_ROWS.strip(),
            window_and_holder_rows=causal + sql.WINDOW_AND_HOLDER_ROWS.strip(),
            skip=sql.SKIP,
            skip_unflushed=sql.SKIP,
            release=sql.RELEASE,
            pause=causal + sql.PAUSE.strip(),
            pause_or_slot_run=causal + sql.PAUSE_OR_SLOT_RUN.strip(),
            pause_or_slot_succeeded=causal + sql.PAUSE_OR_SLOT_SUCCEEDED.strip(),
            insert_unless_taken=(
                sql.INSERT_UNLESS_TAKEN_ON_GALERA if galera else sql.INSERT_UNLESS_TAKEN
            ),
            skip_if_blocked=sql.SKIP_IF_BLOCKED if mariadb_alone else None,
            skip_if_window_blocked=sql.SKIP_IF_WINDOW_BLOCKED if mariadb_alone else None,
            claim_then_pause=sql.CLAIM_THEN_PAUSE if mariadb_alone else None,
            claim_then_pause_or_slot_succeeded=(
                sql.CLAIM_THEN_PAUSE_OR_SLOT_SUCCEEDED if mariadb_alone else None
            ),
        )

    def claims_then_reads(self, connection: BaseDatabaseWrapper) -> bool:
        """Only where mysqlclient sends several statements in one message:
        the procedure would be called without, but the scheduler's batch
        asks this too (``jobclaims.claims.batch``), and sends its claims,
        skips and read in one message."""
        return super().claims_then_reads(connection) and mysql.sends_several(connection)

    def checks_refusals_in_insert(self, connection: BaseDatabaseWrapper) -> bool:
        """Where the claim is the procedure (``claims_then_reads()``), which
        reads the pauses and the slot's runs before its INSERT: the plain
        INSERT cannot ask for them."""
        return self.claims_then_reads(connection)

    def _run_params(
        self, cursor: CursorWrapper, run: ClaimRow, lease: datetime.timedelta
    ) -> dict[str, Any]:
        # The jobs whose pause holds for this claim too, for CLAIM_THEN_PAUSE's read.
        return {**super()._run_params(cursor, run, lease), **naming.pausing_jobs(run.job)}

    def _lease(self, lease: datetime.timedelta) -> object:
        return mysql.lease(lease)

    def _released(self, cursor: CursorWrapper) -> Released:
        if cursor.rowcount != 1:
            return Released(False)
        return Released(True, mysql.finished_at(cursor.lastrowid))

    def _refused_at_once(self, cause: BaseException | None) -> bool:
        return mysql.refused_at_once(cause, self.on_galera)


class SQLiteStatements(ClaimStatements):
    """SQLite: every claim reads first (see ``jobclaims.claims.backends.sqlite``)."""

    def _written(self, connection: BaseDatabaseWrapper) -> Written:
        sql = sqlite
        return Written(
            insert=sql.INSERT,
            insert_returning=sql.INSERT_RETURNING,
            read_back=sql.READ_BACK,
            window_rows=sql.WINDOW_ROWS,
            window_and_holder_rows=sql.WINDOW_AND_HOLDER_ROWS,
            skip=sql.SKIP,
            skip_unflushed=sql.SKIP,
            # Not RETURNING: SQLite ends an UPDATE … RETURNING, and so commits
            # it, only once its row is fetched, and a process paused between
            # the two would hold the whole file's write lock with its outcome
            # not yet recorded. The plain UPDATE commits within its statement;
            # the finish time is read back only for a receiver that wants it.
            release=sql.RELEASE,
            pause=sql.PAUSE,
            pause_or_slot_run=sql.PAUSE_OR_SLOT_RUN,
            pause_or_slot_succeeded=sql.PAUSE_OR_SLOT_SUCCEEDED,
        )

    def _lease(self, lease: datetime.timedelta) -> object:
        return sqlite.lease(lease)

    def _released(self, cursor: CursorWrapper) -> Released:
        return Released(cursor.rowcount == 1)


_BY_VENDOR: dict[str, type[ClaimStatements]] = {
    "postgresql": PostgreSQLStatements,
    "mysql": MySQLStatements,
    "sqlite": SQLiteStatements,
}
