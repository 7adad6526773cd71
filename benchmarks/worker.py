"""The child's side of the multi-process benchmarks: one OS process.

The parent starts a worker with a pipe per round (``benchmarks.contention``),
and talks to it in lines of JSON. Each round the worker reads its orders
from stdin, says it is ready, blocks on that round's pipe until the parent
closes it (every worker wakes at the same instant), then does the work and
prints how long it took from its wake-up.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import cache
from time import perf_counter_ns
from typing import Any

from benchmarks.runqueue import RunQueue
from benchmarks.timing import verb

READY = "ready"

#: The variable that names the scratch database the parent created.
DATABASE_VARIABLE = "JOBCLAIMS_BENCH_DATABASE"
#: The variable that lists the worker's start pipes, one per round.
PIPES_VARIABLE = "JOBCLAIMS_BENCH_START_FDS"


def main() -> None:
    # Django is set up here, in the child, before any model is imported.
    import django

    django.setup()
    from django.db import connection

    connection.settings_dict["NAME"] = os.environ[DATABASE_VARIABLE]
    connection.ensure_connection()
    _warm_up()
    _run_queue()
    for start_fd in json.loads(os.environ[PIPES_VARIABLE]):
        orders = json.loads(sys.stdin.readline())
        _say(READY)
        os.read(start_fd, 1)  # Returns when the parent closes the pipe.
        _say(json.dumps(_ROUNDS[orders["kind"]](**orders["args"])))


def _warm_up() -> None:
    """Run the code paths once, so the first timed claim is not a cold one."""
    from benchmarks.uncontended import LEASE
    from jobclaims.models import JobRun

    run = JobRun.objects.claim(f"warm-up-{os.getpid()}", "w", lease=LEASE)
    if run is not None:
        run.release()


def _claim(job: str, window: str) -> dict[str, Any]:
    """Claim ``window`` once and keep it: the parent releases the winner.

    Also says which statements the claim sent and how long each took, on
    the wall clock and less the time this thread and the server's queued
    for a CPU (``None`` if unknown): 32 workers on 2 CPUs queue for them
    whether or not a winner holds them up.
    """
    from django.db import connection

    from benchmarks.uncontended import LEASE
    from jobclaims.models import JobRun

    sent: list[tuple[str, int, int | None]] = []

    def timed(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
    ) -> Any:
        took = _run_queue().timed()
        try:
            with took:
                return execute(sql, params, many, context)
        finally:
            sent.append((verb(sql), took.wall, took.excluding_queue))

    with connection.execute_wrapper(timed):
        run = JobRun.objects.claim(job, window, lease=LEASE)
    return {"won": run is not None, "sent": sent}


@cache
def _run_queue() -> RunQueue:
    """This worker's thread and its server thread, found once, before any round."""
    from django.db import connection

    return RunQueue(connection)


def _claim_many(job_prefix: str, count: int, seconds: float) -> dict[str, Any]:
    """Claim and release ``count`` distinct jobs, or as many as fit in ``seconds``."""
    from benchmarks.uncontended import LEASE
    from jobclaims.models import JobRun

    start = perf_counter_ns()
    deadline = start + int(seconds * 1e9)
    claimed = refused = 0
    for number in range(count):
        if perf_counter_ns() > deadline:
            break
        run = JobRun.objects.claim(f"{job_prefix}-{number}", "w", lease=LEASE)
        if run is None:
            refused += 1
        else:
            claimed += 1
            run.release()
    return {"claimed": claimed, "refused": refused, "ns": perf_counter_ns() - start}


def _say(line: str) -> None:
    print(line, flush=True)


_ROUNDS: dict[str, Callable[..., dict[str, Any]]] = {
    "claim": _claim,
    "claim_many": _claim_many,
}

if __name__ == "__main__":
    main()
