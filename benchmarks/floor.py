"""The database's own floor: what one atomic claim costs in raw SQL.

A claim can cost no less than one round trip, and no less than the cheapest
statement that inserts a row unless its unique keys are taken. Both are timed
here through the driver's own cursor, with no ORM in between, on a scratch
copy of the claims table: same columns, same unique constraints, same
indexes, so the floor pays for the same index maintenance the claim does.
"""

from __future__ import annotations

import datetime
import itertools
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter_ns, thread_time_ns
from typing import Any

from django.apps.registry import Apps
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from jobclaims.claims.engine import process_owner
from jobclaims.models import JobRun

FLOOR_TABLE = "bench_floor_jobrun"

#: Numbers the floor's windows, so that each raw claim is of a new window.
_windows = itertools.count()

#: Every column a claim writes; the rest have defaults or may be NULL.
_COLUMNS = (
    "job",
    "window",
    "schedule",
    "status",
    "owner",
    "token",
    "attempt",
    "failures",
    "holds_job",
    "claimed_at",
    "expires_at",
    "error",
)


@dataclass(frozen=True)
class RawClaim:
    """One backend's cheapest correct claim-and-release, as two statements.

    The insert claims the window unless a unique constraint (the window's
    row, or the job's current holder) already stands in the way, and returns
    what ``claim()`` returns: the key and the lease. The update releases it,
    compare-and-set on the token like ``release()``.
    """

    insert: str
    update: str
    #: Turn a token and a lease into the driver's parameter values.
    token: Callable[[uuid.UUID], object]
    lease: Callable[[datetime.timedelta], object]


def raw_claim_for(connection: BaseDatabaseWrapper) -> RawClaim:
    """The backend's raw claim, written against the floor table."""
    columns = ", ".join(connection.ops.quote_name(column) for column in _COLUMNS)
    if connection.vendor == "postgresql":
        now = "STATEMENT_TIMESTAMP()"
        return RawClaim(
            insert=_insert("INSERT", columns, now, f"{now} + %s", "ON CONFLICT DO NOTHING"),
            update=_update(now),
            token=lambda token: token,
            lease=lambda lease: lease,
        )
    if connection.vendor == "mysql":
        now = "UTC_TIMESTAMP(6)"
        return RawClaim(
            insert=_insert("INSERT IGNORE", columns, now, f"{now} + INTERVAL %s MICROSECOND"),
            update=_update(now),
            token=str,
            lease=lambda lease: lease // datetime.timedelta(microseconds=1),
        )
    if connection.vendor == "sqlite":
        # The sqlite3 module takes "?" placeholders, and no "%%" escapes.
        now = "STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW')"
        later = "STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW', ?)"
        return RawClaim(
            insert=_insert("INSERT OR IGNORE", columns, now, later, mark="?"),
            update=_update(now, mark="?"),
            token=lambda token: token.hex,
            lease=lambda lease: f"+{lease.total_seconds()} seconds",
        )
    raise ValueError(f"no raw claim is written for {connection.vendor!r}; add one to {__name__}")


def _insert(
    verb: str, columns: str, now: str, expires: str, conflict: str = "", mark: str = "%s"
) -> str:
    return (
        f"{verb} INTO {FLOOR_TABLE} ({columns}) "
        f"VALUES ({mark}, {mark}, '', 'running', {mark}, {mark}, 1, 0, TRUE, {now}, {expires}, '') "
        f"{conflict} RETURNING id, claimed_at, expires_at"
    )


def _update(now: str, mark: str = "%s") -> str:
    return (
        f"UPDATE {FLOOR_TABLE} SET status = 'succeeded', error = '', "
        f"holds_job = NULL, finished_at = {now} "
        f"WHERE id = {mark} AND token = {mark} AND status = 'running'"
    )


@contextmanager
def floor_table(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """Create the scratch copy of the claims table, and drop it after."""
    model = _copy_of_jobrun()
    with connection.schema_editor() as editor:
        editor.create_model(model)
    try:
        yield
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(model)


def _copy_of_jobrun() -> type[models.Model]:
    """JobRun's fields, constraints and indexes on another table.

    Built from the model itself, so the copy follows any index the model
    gains; its own app registry keeps it out of the project's models.
    """
    meta = JobRun._meta

    def renamed(item: Any) -> Any:
        copy = item.clone()
        copy.name = item.name.replace("jobclaims_", "bench_floor_")
        return copy

    fields: list[Any] = list(meta.local_fields)
    attributes: dict[str, Any] = {field.name: field.clone() for field in fields}
    attributes["__module__"] = __name__
    attributes["Meta"] = type(
        "Meta",
        (),
        {
            "apps": Apps(),
            "app_label": "benchmarks",
            "db_table": FLOOR_TABLE,
            "constraints": [renamed(constraint) for constraint in meta.constraints],
            "indexes": [renamed(index) for index in meta.indexes],
        },
    )
    return type("FloorRun", (models.Model,), attributes)


class RawCycles:
    """Timed cycles of the floor, through the driver's own cursor."""

    def __init__(self, connection: BaseDatabaseWrapper, lease: datetime.timedelta):
        connection.ensure_connection()
        self._cursor = connection.connection.cursor()
        self._raw = raw_claim_for(connection)
        self._lease = self._raw.lease(lease)
        self._owner = process_owner()

    def round_trip(self) -> dict[str, int]:
        """One ``SELECT 1``: the least any statement costs."""
        start = perf_counter_ns()
        self._cursor.execute("SELECT 1")
        self._cursor.fetchall()
        return {"statement": perf_counter_ns() - start}

    def claim_and_release(self) -> dict[str, int]:
        """Claim a new window of one job and release it, in raw SQL."""
        token = uuid.uuid4()
        params = ("floor", f"floor-{next(_windows)}", self._owner, self._raw.token(token))
        start, cpu = perf_counter_ns(), thread_time_ns()
        self._cursor.execute(self._raw.insert, (*params, self._lease))
        rows = self._cursor.fetchall()
        claimed = perf_counter_ns()
        if len(rows) != 1:
            raise RuntimeError(
                "the raw claim of a new window was refused; if JobRun gained a "
                f"NOT NULL column, add it to the INSERT in {__name__}"
            )
        self._cursor.execute(self._raw.update, (rows[0][0], self._raw.token(token)))
        released = perf_counter_ns()
        if self._cursor.rowcount != 1:
            raise RuntimeError("the raw release changed no row")
        return {
            "claim": claimed - start,
            "cycle": released - start,
            "cpu": thread_time_ns() - cpu,
        }

    def close(self) -> None:
        self._cursor.close()
