"""Timing on a noisy shared machine: interleaved samples, medians, p99s.

Absolute times on a shared two-core machine drift by tens of percent from
one minute to the next, so every figure that is compared with another is
measured in the same rounds, alternating, and each is summarised by its
median (the typical cost) and its 99th percentile (the slow tail).
"""

from __future__ import annotations

import math
import statistics
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

#: One timed cycle: returns how long each of its parts took, in nanoseconds.
Cycle = Callable[[], dict[str, int]]


@dataclass(frozen=True)
class Samples:
    """Durations of many runs of one thing, in microseconds."""

    values: tuple[float, ...]

    @classmethod
    def of_nanoseconds(cls, durations: list[int]) -> Samples:
        return cls(tuple(duration / 1000 for duration in durations))

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def p99(self) -> float:
        """The nearest-rank 99th percentile: 1 in 100 runs is slower."""
        ordered = sorted(self.values)
        return ordered[math.ceil(0.99 * len(ordered)) - 1]

    def summary(self) -> dict[str, float | int]:
        return {
            "median_us": round(self.median, 1),
            "p99_us": round(self.p99, 1),
            "samples": len(self.values),
        }


@dataclass(frozen=True)
class Timings:
    """Interleaved timings: every duration, and the round it was taken in."""

    #: Per cycle, per part: the durations of each round, in nanoseconds.
    rounds: dict[str, dict[str, list[list[int]]]]

    def samples(self, cycle: str, part: str) -> Samples:
        """All of a part's durations, from every round."""
        return Samples.of_nanoseconds(
            [d for durations in self.rounds[cycle][part] for d in durations]
        )

    def ratio(self, cycle: str, baseline: str, part: str = "cycle") -> float:
        """How many times ``baseline`` one ``cycle`` costs, round by round.

        Each round's median is divided by the baseline's median of the same
        round, taken moments apart on the same machine, and the median of
        those ratios is returned: drift between rounds cancels out.
        """
        pairs = zip(self.rounds[cycle][part], self.rounds[baseline][part], strict=True)
        return statistics.median(statistics.median(a) / statistics.median(b) for a, b in pairs)

    def difference_ratio(self, cycle: str, less: str, baseline: str, part: str = "cycle") -> float:
        """``ratio()`` of what ``cycle`` costs beyond ``less``, round by round:
        a way in without the framework call it is made in."""
        rounds = zip(
            self.rounds[cycle][part],
            self.rounds[less][part],
            self.rounds[baseline][part],
            strict=True,
        )
        return statistics.median(
            (statistics.median(a) - statistics.median(b)) / statistics.median(c)
            for a, b, c in rounds
        )


def interleaved(
    cycles: dict[str, Cycle], *, rounds: int, per_round: int, warmup: int, seconds: float
) -> Timings:
    """Time each cycle ``per_round`` times a round, the cycles taking turns.

    Short turns keep the cycles compared moments apart, so their ratios
    hold even when the machine's speed wanders. Stops after ``rounds``
    rounds, or after the round that ends past ``seconds`` (but never before
    five rounds), so a slow machine takes fewer samples instead of longer.
    """
    for cycle in cycles.values():
        for _ in range(warmup):
            cycle()
    taken: dict[str, dict[str, list[list[int]]]] = {name: {} for name in cycles}
    deadline = perf_counter_ns() + int(seconds * 1e9)
    for done in range(1, rounds + 1):
        for name, cycle in cycles.items():
            round_: dict[str, list[int]] = {}
            for _ in range(per_round):
                for part, duration in cycle().items():
                    round_.setdefault(part, []).append(duration)
            for part, durations in round_.items():
                taken[name].setdefault(part, []).append(durations)
        if done >= 5 and perf_counter_ns() > deadline:
            break
    return Timings(taken)


@contextmanager
def round_trips(connection: BaseDatabaseWrapper) -> Iterator[Callable[[], int | None]]:
    """Count the requests the client sends the server while the block runs.

    ``CaptureQueriesContext`` sees the statements Django logs; this sees the
    wire, including what the driver sends on its own (psycopg's ``BEGIN``,
    mysqlclient's ``SET autocommit``). The count is ``None`` on SQLite, a
    library in the process that has no round trips.
    """
    connection.ensure_connection()
    if connection.vendor == "postgresql":
        with _libpq_trace(connection) as count:
            yield count
    elif connection.vendor == "mysql":
        with _mysql_requests(connection) as count:
            yield count
    else:
        yield lambda: None


@contextmanager
def _libpq_trace(connection: BaseDatabaseWrapper) -> Iterator[Callable[[], int | None]]:
    from psycopg import pq

    pgconn = connection.connection.pgconn
    counted: list[int] = []
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield lambda: counted[0] if counted else None
        finally:
            pgconn.untrace()
        trace.seek(0)
        # The server ends its answer to every request with ReadyForQuery.
        counted.append(sum("\tReadyForQuery\t" in line for line in trace))


@contextmanager
def _mysql_requests(connection: BaseDatabaseWrapper) -> Iterator[Callable[[], int | None]]:
    """Count mysqlclient's calls that each send the server one request: a
    query (one message, however many statements it holds), a change of
    autocommit, a commit, a rollback. The server's own count of
    ``Questions`` counts each statement of a message, not the message."""
    raw = connection.connection
    sent = 0

    def counted(call: Callable[..., Any]) -> Callable[..., Any]:
        def sending(*args: Any) -> Any:
            nonlocal sent
            sent += 1
            return call(*args)

        return sending

    # The driver's connection lets its attributes be set, not deleted.
    originals = {name: getattr(raw, name) for name in ("query", "autocommit", "commit", "rollback")}
    for name, call in originals.items():
        setattr(raw, name, counted(call))
    try:
        yield lambda: sent
    finally:
        for name, call in originals.items():
            setattr(raw, name, call)


def verb(sql: str) -> str:
    """What a statement does: its first word; MariaDB's
    ``SET STATEMENT x = y FOR INSERT ...`` is an INSERT, and a union of
    selects in parentheses, ``(SELECT ...``, a SELECT."""
    words = sql.lstrip("(").split(None, 1)
    if words[0].upper() == "SET" and " FOR " in sql:
        return verb(sql.split(" FOR ", 1)[1])
    return words[0].upper()
