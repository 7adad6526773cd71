"""How fast ``prune()`` deletes history, and how long each statement locks.

Each DELETE runs in autocommit, so the rows it deletes stay locked from the
moment it starts until it returns: its duration is how long a claim of one
of those rows could have to wait. Every statement ``prune()`` sends is timed
on its way through the connection.

A prune slower than its target could run for hours on a million rows, so it
gets a time budget: no statement starts after the budget is spent, and the
database cancels any statement still running when it is. The rate is then
of the rows deleted within the budget.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import perf_counter_ns
from typing import Any

from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

from benchmarks import history
from benchmarks.timing import Samples
from jobclaims.controls.pruning import prune

#: Older than every history row, younger than every claim the benchmark made.
OLDER_THAN = datetime.timedelta(days=30)


class _OutOfTime(Exception):
    """The prune's time budget is spent."""


def timed_prune(connection: BaseDatabaseWrapper, budget: float) -> dict[str, Any]:
    """Run ``prune(OLDER_THAN)`` for at most ``budget`` seconds, timing each statement."""
    durations: dict[str, list[int]] = {}
    start = perf_counter_ns()
    deadline = start + int(budget * 1e9)

    def timed(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
    ) -> Any:
        began = perf_counter_ns()
        if began > deadline:
            raise _OutOfTime
        try:
            return execute(sql, params, many, context)
        finally:
            verb = sql.split(None, 1)[0].upper()
            durations.setdefault(verb, []).append(perf_counter_ns() - began)

    before = history.count(connection)
    finished = False
    with _statement_timeout(connection, budget):
        try:
            with connection.execute_wrapper(timed):
                prune(OLDER_THAN)
            finished = True
        except (_OutOfTime, OperationalError):
            if perf_counter_ns() < deadline:
                raise  # Not cancelled by the budget: a real failure.
    seconds = (perf_counter_ns() - start) / 1e9
    deleted = before - history.count(connection)
    statements = {verb: Samples.of_nanoseconds(values) for verb, values in durations.items()}
    return {
        "finished": finished,
        "budget_seconds": budget,
        "deleted": deleted,
        "seconds": round(seconds, 2),
        "rows_per_second": round(deleted / seconds),
        "statements": {verb: len(samples.values) for verb, samples in statements.items()},
        "longest_ms": {
            verb: round(max(samples.values) / 1000, 1) for verb, samples in statements.items()
        },
        "median_ms": {
            verb: round(samples.median / 1000, 1) for verb, samples in statements.items()
        },
    }


@contextmanager
def _statement_timeout(connection: BaseDatabaseWrapper, seconds: float) -> Iterator[None]:
    """Have the database cancel any statement that runs past ``seconds``."""
    connection.ensure_connection()
    if connection.vendor == "sqlite":
        deadline = perf_counter_ns() + int(seconds * 1e9)
        # SQLite calls this every 10,000 virtual machine steps; a true
        # return interrupts the statement.
        connection.connection.set_progress_handler(lambda: perf_counter_ns() > deadline, 10_000)
        try:
            yield
        finally:
            connection.connection.set_progress_handler(None, 0)
        return
    setting, value, reset = {
        "postgresql": ("statement_timeout", int(seconds * 1000), "DEFAULT"),
        "mysql": ("max_statement_time", seconds, "0"),
    }[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(f"SET SESSION {setting} = %s", [value])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"SET SESSION {setting} = {reset}")
