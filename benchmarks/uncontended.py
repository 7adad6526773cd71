"""One process claiming and releasing new windows, beside the raw floor."""

from __future__ import annotations

import datetime
import itertools
from time import perf_counter_ns, thread_time_ns
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.test.utils import CaptureQueriesContext

from benchmarks.floor import RawCycles
from benchmarks.timing import Timings, interleaved, round_trips, verb
from jobclaims.models import JobRun

LEASE = datetime.timedelta(minutes=10)

#: Numbers the claims' windows, so that each claim is of a new window.
_windows = itertools.count()


class ClaimCycles:
    """Timed claim-and-release cycles of one job, each on a new window.

    A new window each time is what a scheduled job does all its life: one
    claim per tick, on a window nobody has claimed yet. Each cycle reports
    its wall-clock time and the CPU time this process spent in it: the
    client's own work, which a busy machine stretches in wall-clock time.
    """

    def __init__(self, job: str):
        self.job = job

    def claim_and_release(self) -> dict[str, int]:
        window = f"w-{next(_windows)}"
        cpu = thread_time_ns()
        start = perf_counter_ns()
        run = JobRun.objects.claim(self.job, window, lease=LEASE)
        claimed = perf_counter_ns()
        if run is None:
            raise RuntimeError(f"the claim of the new window {window} was refused")
        if not run.release():
            raise RuntimeError(f"the release of {run} changed no row")
        return {
            "claim": claimed - start,
            "cycle": perf_counter_ns() - start,
            "cpu": thread_time_ns() - cpu,
        }


def claim_against_floor(
    connection: BaseDatabaseWrapper,
    claims: ClaimCycles,
    *,
    rounds: int,
    per_round: int,
    warmup: int,
    seconds: float,
) -> Timings:
    """Time ``SELECT 1``, the raw claim and ``claim()`` in alternating rounds."""
    raw = RawCycles(connection, LEASE)
    try:
        return interleaved(
            {
                "round_trip": raw.round_trip,
                "floor": raw.claim_and_release,
                "claim": claims.claim_and_release,
            },
            rounds=rounds,
            per_round=per_round,
            warmup=warmup,
            seconds=seconds,
        )
    finally:
        raw.close()


def statements_per_cycle(connection: BaseDatabaseWrapper, claims: ClaimCycles) -> dict[str, Any]:
    """What one cycle sends: the statements Django logs, and the round trips."""
    floor = RawCycles(connection, LEASE)
    try:
        with round_trips(connection) as floor_trips:
            floor.claim_and_release()
    finally:
        floor.close()
    with CaptureQueriesContext(connection) as captured, round_trips(connection) as claim_trips:
        claims.claim_and_release()
    return {
        "statements": len(captured),
        "sequence": [verb(query["sql"]) for query in captured],
        "round_trips": claim_trips(),
        "floor_round_trips": floor_trips(),
    }
