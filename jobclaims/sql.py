"""The statements every claim sends, written out in each backend's SQL.

Every scheduled run reads the rows in its window's way, inserts its claim
and releases it, on every server, for the life of a project; every instance
that steps aside reads and records its skip. Built by the ORM on each call,
those statements cost the client more CPU than the database needs to run
them (docs/performance.md). Written out once per backend, from the models'
own table and column names and the clock of ``DatabaseNow``, they cost what
the driver costs. Everything rarer (takeovers, renewals, fenced blocks, the
admin) goes through the ORM.
"""

from __future__ import annotations

import datetime
import functools
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.db.models.sql import Query

from jobclaims.clock import DatabaseNow, as_utc, lease_end_sql

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

    from jobclaims.models import JobRun

#: A row in a claim's way: its window, its status, and whether its lease ended.
Rival = tuple[str, str, bool]


class ClaimStatements:
    """One backend's claim statements, each a single round trip."""

    def __init__(self, connection: BaseDatabaseWrapper):
        from jobclaims.models import JobRun, JobSkip

        now, _ = Query(None).get_compiler(connection=connection).compile(DatabaseNow())
        lease_end, self._lease_param = lease_end_sql(connection)
        self._token = JobRun._meta.get_field("token")
        run, skip = _Table(connection, JobRun), _Table(connection, JobSkip)
        self._window_rows = (
            f"SELECT {run['window']}, {run['status']}, {run['expires_at']} <= {now} "
            f"FROM {run} WHERE ({run['job']} = %s AND {run['window']} = %s)"
        )
        # Each side of the OR is a lookup on one of the two unique indexes.
        self._window_and_holder_rows = (
            f"{self._window_rows} OR ({run['job']} = %s AND {run['holds_job']} IS NOT NULL)"
        )
        written = run.names("job", "window", "schedule", "owner", "token", "holds_job")
        self._insert_run = (
            f"INSERT INTO {run} ({written}, {run.names('status', 'attempt', 'error')}, "
            f"{run.names('claimed_at', 'expires_at')}) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s, 1, '', {now}, {lease_end})"
        )
        key_and_stamps = run.names("id", "claimed_at", "expires_at")
        self._returning = f" RETURNING {key_and_stamps}"
        self._read_back = (
            f"SELECT {key_and_stamps} FROM {run} "
            f"WHERE {run['job']} = %s AND {run['window']} = %s AND {run['token']} = %s"
        )
        self._insert_skip = (
            f"INSERT INTO {skip} ({skip.names('job', 'window', 'owner', 'reason', 'skipped_at')})"
            f" VALUES (%s, %s, %s, %s, {now})"
        )
        self._release = (
            f"UPDATE {run} SET {run['status']} = %s, {run['error']} = %s, "
            f"{run['holds_job']} = NULL, {run['finished_at']} = {now} "
            f"WHERE {run['id']} = %s AND {run['token']} = %s AND {run['status']} = %s"
        )

    def rivals(self, cursor: CursorWrapper, run: JobRun) -> list[Rival]:
        """The window's row and, unless ``run`` may overlap, the job's holder."""
        if run.holds_job:
            cursor.execute(self._window_and_holder_rows, [run.job, run.window, run.job])
        else:
            cursor.execute(self._window_rows, [run.job, run.window])
        return [(window, status, bool(lapsed)) for window, status, lapsed in cursor.fetchall()]

    def insert(self, cursor: CursorWrapper, run: JobRun, lease: datetime.timedelta) -> None:
        """Insert ``run``, stamped by the database's clock, and load its key
        and stamps; ``IntegrityError`` when a unique constraint is taken."""
        token = self._token.get_db_prep_value(run.token, cursor.db)
        written = [run.job, run.window, run.schedule, run.owner, token, run.holds_job]
        params = [*written, str(run.status), self._lease_param(lease)]
        if cursor.db.features.can_return_columns_from_insert:
            cursor.execute(self._insert_run + self._returning, params)
        else:  # MySQL, and SQLite before 3.35: read the row back.
            cursor.execute(self._insert_run, params)
            cursor.execute(self._read_back, [run.job, run.window, token])
        run.pk, claimed_at, expires_at = cursor.fetchone()
        run.claimed_at, run.expires_at = as_utc(claimed_at), as_utc(expires_at)
        run._state.adding, run._state.db = False, cursor.db.alias

    def skip(self, cursor: CursorWrapper, run: JobRun, reason: str) -> None:
        """Record that ``run``'s would-be holder stepped aside, and why."""
        cursor.execute(self._insert_skip, [run.job, run.window, run.owner, str(reason)])

    def release(self, cursor: CursorWrapper, run: JobRun, status: str, error: str) -> bool:
        """End ``run`` with ``status`` if it still holds its claim."""
        token = self._token.get_db_prep_value(run.token, cursor.db)
        running = str(run.Status.RUNNING)
        cursor.execute(self._release, [str(status), error, run.pk, token, running])
        return bool(cursor.rowcount == 1)


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


def claim_statements(alias: str) -> ClaimStatements:
    """The statements for the database ``alias``, written on first use."""
    return _written(alias, connections[alias].vendor)


@functools.cache
def _written(alias: str, vendor: str) -> ClaimStatements:
    return ClaimStatements(connections[alias])
