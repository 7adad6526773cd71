"""Years of finished runs in the claims table, written in seconds.

The history is what a project accumulates: half of it the benchmarked job's
own past windows (a minutely job's year is half a million rows), the other
half spread over fifty other jobs; one run in a hundred failed. Every row
finished more than a month ago, so ``prune`` may delete all but each job's
newest. Rows are generated inside the database, in a few statements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.core.management.color import no_style
from django.db.backends.base.base import BaseDatabaseWrapper

from benchmarks.timing import verb
from benchmarks.uncontended import LEASE
from jobclaims.models import JobRun

TABLE = JobRun._meta.db_table

#: Rows per statement on the backends that fill in batches.
_BATCH = 250_000

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
    "finished_at",
    "error",
)


def empty(connection: BaseDatabaseWrapper) -> None:
    """Delete every claim, the fastest way the backend has (TRUNCATE)."""
    statements = connection.ops.sql_flush(no_style(), [TABLE], reset_sequences=False)
    connection.ops.execute_sql_flush(statements)
    analyze(connection)


def fill(connection: BaseDatabaseWrapper, rows: int, job: str) -> None:
    """Add ``rows`` finished claims, half of them of ``job``."""
    columns = ", ".join(connection.ops.quote_name(column) for column in _COLUMNS)
    with connection.cursor() as cursor:
        for first in range(1, rows + 1, _BATCH):
            last = min(first + _BATCH - 1, rows)
            sql, params = _generator(connection.vendor, first, last, job)
            cursor.execute(f"INSERT INTO {TABLE} ({columns}) {sql}", params)
    analyze(connection)


def _generator(vendor: str, first: int, last: int, job: str) -> tuple[str, list[Any]]:
    """A SELECT that makes history rows ``first`` to ``last``, per backend.

    Row ``n`` was claimed ``n`` minutes before a month ago, so the rows
    span the years before; ``t`` is its claim time.
    """
    if vendor == "postgresql":
        return (
            "SELECT CASE WHEN n %% 2 = 0 THEN %s ELSE 'history-' || (n %% 100) END, "
            "'h-' || n, 'minutely', CASE WHEN n %% 100 = 1 THEN 'failed' ELSE 'succeeded' END, "
            "'history', gen_random_uuid(), 1, CASE WHEN n %% 100 = 1 THEN 1 ELSE 0 END, NULL, "
            "t, t + INTERVAL '10 minutes', t + INTERVAL '1 second', '' "
            "FROM (SELECT n, STATEMENT_TIMESTAMP() - INTERVAL '31 days' "
            "- n * INTERVAL '1 minute' AS t FROM generate_series(%s, %s) AS n) AS h",
            [job, first, last],
        )
    if vendor == "mysql":
        # MariaDB's SEQUENCE engine: seq_1_to_9 is a table of 1 to 9.
        return (
            "SELECT IF(seq %% 2 = 0, %s, CONCAT('history-', seq %% 100)), "
            "CONCAT('h-', seq), 'minutely', IF(seq %% 100 = 1, 'failed', 'succeeded'), "
            "'history', UUID(), 1, IF(seq %% 100 = 1, 1, 0), NULL, "
            "t, t + INTERVAL 10 MINUTE, t + INTERVAL 1 SECOND, '' "
            "FROM (SELECT seq, UTC_TIMESTAMP(6) - INTERVAL 31 DAY "
            f"- INTERVAL seq MINUTE AS t FROM seq_{first}_to_{last}) AS h",
            [job],
        )
    if vendor == "sqlite":
        moment = "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', '-31 days', -n || ' minutes'"
        return (
            "SELECT CASE WHEN n %% 2 = 0 THEN %s ELSE 'history-' || (n %% 100) END, "
            "'h-' || n, 'minutely', CASE WHEN n %% 100 = 1 THEN 'failed' ELSE 'succeeded' END, "
            "'history', LOWER(HEX(RANDOMBLOB(16))), 1, "
            "CASE WHEN n %% 100 = 1 THEN 1 ELSE 0 END, NULL, "
            f"{moment}), {moment}, '+10 minutes'), {moment}, '+1 second'), '' "
            "FROM (WITH RECURSIVE seq(n) AS "
            "(SELECT %s UNION ALL SELECT n + 1 FROM seq WHERE n < %s) SELECT n FROM seq)",
            [job, first, last],
        )
    raise ValueError(f"no history generator is written for {vendor!r}; add one to {__name__}")


def analyze(connection: BaseDatabaseWrapper) -> None:
    """Refresh the planner's statistics, as autovacuum would after a while.

    Years of history accumulate slowly, and the planner's statistics keep
    up with them; a bulk insert outruns them, so catch up by hand.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {TABLE}")
            cursor.fetchall()
        elif connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE {TABLE}")
        else:
            cursor.execute("ANALYZE")


def count(connection: BaseDatabaseWrapper) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {TABLE}")
        return int(cursor.fetchone()[0])


def claim_query_plan(connection: BaseDatabaseWrapper, job: str, window: str) -> dict[str, object]:
    """The read a refused claim sends, and how the database runs it.

    A claim of a new window is one INSERT, whose unique indexes are the
    only thing history can slow. The claim that finds the window taken, or
    the job held, then reads the rows in its way: that read must stay a
    lookup on both unique indexes however many finished runs the job has.
    The statement and its parameters are taken from a real refused claim
    and sent back the way the claim sent them, so the plan shown is the plan
    of what ``claim()`` runs. That matters on SQLite, which binds
    parameters: with the values written into the SQL instead, it plans
    differently.
    """
    sent: list[tuple[str, Sequence[Any] | None]] = []

    def keep(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
    ) -> Any:
        sent.append((sql, params))
        return execute(sql, params, many, context)

    run = JobRun.objects.claim(job, window, lease=LEASE)
    if run is None:
        raise RuntimeError(f"the claim of the new window {window} was refused")
    with connection.execute_wrapper(keep):
        refused = JobRun.objects.claim(job, window, lease=LEASE)
    run.release()
    if refused is not None:
        raise RuntimeError(f"a second claim of the held window {window} was granted")
    # The read of the claim rows in the way, not the pause read before it.
    select, params = next(
        (sql, params) for sql, params in sent if verb(sql) == "SELECT" and f" {TABLE}" in sql
    )
    explain = {
        "postgresql": "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF)",
        "mysql": "ANALYZE",
        "sqlite": "EXPLAIN QUERY PLAN",
    }[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(f"{explain} {select}", params)
        header = [column[0] for column in cursor.description]
        rows = cursor.fetchall()
    return {
        "statement": select,
        "params": [str(param) for param in params or ()],
        "plan": _plan_lines(connection.vendor, header, rows),
    }


def _plan_lines(vendor: str, header: list[str], rows: list[tuple[object, ...]]) -> list[str]:
    if vendor == "postgresql":
        return [str(row[0]) for row in rows]
    if vendor == "sqlite":
        return [str(row[-1]) for row in rows]
    return [
        ", ".join(
            f"{name}={value}" for name, value in zip(header, row, strict=True) if value is not None
        )
        for row in rows
    ]
