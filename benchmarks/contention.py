"""Real OS processes claiming at the same instant, and claiming in bulk.

Threads would share one interpreter lock and queue on it, hiding or faking
the database's own queueing, so every contender here is a process of its
own with its own connection, held at a pipe until all are ready
(``jobclaims.testing.StartingLine``) and released together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from time import perf_counter_ns
from typing import IO, Any, cast

from django.conf import settings
from django.db import connection

from benchmarks.timing import Samples
from benchmarks.worker import DATABASE_VARIABLE, PIPES_VARIABLE, READY
from jobclaims.models import JobRun
from jobclaims.testing import StartingLine

Orders = dict[str, Any]

#: What each statement a loser sends is for (see ``_statement_times``).
STATEMENT_ROLES = ("claim INSERT", "read", "skip INSERT")


@dataclass(frozen=True)
class _Worker:
    """One worker process and the two pipes the parent talks to it through."""

    process: subprocess.Popen[str]
    orders: IO[str]
    answers: IO[str]

    def say(self, order: Orders) -> None:
        self.orders.write(json.dumps(order) + "\n")
        self.orders.flush()

    def hear(self, wanted: str | None = None) -> str:
        line = self.answers.readline().rstrip("\n")
        if not line or (wanted is not None and line != wanted):
            raise RuntimeError(f"worker {self.process.pid} said {line!r} instead of {wanted!r}")
        return line


class Workers:
    """``count`` worker processes, with one starting line for each round."""

    def __init__(self, count: int, rounds: int):
        self._lines = [StartingLine() for _ in range(rounds)]
        fds = [line.read_fd for line in self._lines]
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE,
            "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),
            DATABASE_VARIABLE: str(connection.settings_dict["NAME"]),
            PIPES_VARIABLE: json.dumps(fds),
        }
        self._workers = []
        for _ in range(count):
            process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                pass_fds=fds,
                env=environment,
            )
            # Both are PIPEs, never None.
            assert process.stdin is not None
            assert process.stdout is not None
            self._workers.append(_Worker(process, process.stdin, process.stdout))

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for line in self._lines:
            line.release()
        for worker in self._workers:
            worker.orders.close()
            try:
                worker.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
        failed = [worker.process.pid for worker in self._workers if worker.process.returncode]
        if failed and exc_info[0] is None:
            raise RuntimeError(f"worker processes {failed} failed; see their errors above")

    def run_round(self, orders: list[Orders]) -> tuple[list[dict[str, Any]], float]:
        """Give each worker its orders, release all at once, collect results.

        Returns each worker's result and the seconds from the release to
        the last result.
        """
        for worker, order in zip(self._workers, orders, strict=True):
            worker.say(order)
        for worker in self._workers:
            worker.hear(READY)
        line = self._lines.pop(0)
        start = perf_counter_ns()
        line.release()
        results = [json.loads(worker.hear()) for worker in self._workers]
        return results, (perf_counter_ns() - start) / 1e9


def race(processes: int, *, rounds: int) -> dict[str, Any]:
    """``processes`` workers claim one window at once, ``rounds`` times.

    Each round must have exactly one winner. The losers say which
    statements they sent and how long each took: a loser must wait for the
    winner's commit before it may skip, and the statement times show where.
    """
    winners: list[int] = []
    losers: list[dict[str, Any]] = []
    paths: Counter[str] = Counter()
    with Workers(processes, rounds) as workers:
        for number in range(rounds):
            window = f"race-{processes}-{number}"
            order = {"kind": "claim", "args": {"job": "race", "window": window}}
            results, _ = workers.run_round([order] * processes)
            winners.append(sum(result["won"] for result in results))
            for result in results:
                if not result["won"]:
                    losers.append(result)
                    paths[" ".join(verb for verb, *_ in result["sent"])] += 1
            _release_round(window)
    return {
        "processes": processes,
        "rounds": rounds,
        "winners_per_round": winners,
        "loser_statements": dict(paths.most_common()),
        "statement_times": _statement_times(losers),
    }


def _statement_times(losers: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """How long the losers' statements took, by what each was for.

    A loser's last INSERT records its skip, and its SELECT reads the rows
    in its way; an INSERT before those was its claim, refused by the
    winner's row. Each is summed up on the wall clock and, where every one
    was measured, less its threads' waits for a CPU; ``None`` for a kind no
    loser sent.
    """
    taken: dict[str, list[tuple[int, int | None]]] = {role: [] for role in STATEMENT_ROLES}
    for loser in losers:
        sent = loser["sent"]
        skip = max(index for index, (verb, *_) in enumerate(sent) if verb == "INSERT")
        for index, (verb, wall, unqueued) in enumerate(sent):
            if verb == "SELECT":
                role = "read"
            else:
                role = "skip INSERT" if index == skip else "claim INSERT"
            taken[role].append((wall, unqueued))
    return {
        role: {
            "wall": _summary([wall for wall, _ in times]),
            "excluding_queue": _summary([unqueued for _, unqueued in times]),
        }
        for role, times in taken.items()
    }


def _summary(durations: list[int | None]) -> dict[str, Any] | None:
    if not durations or None in durations:
        return None
    return Samples.of_nanoseconds(cast("list[int]", durations)).summary()


def _release_round(window: str) -> None:
    """Release the round's winners, so the next round's job is free."""
    for run in JobRun.objects.running().filter(window=window):
        run.release()


def throughput(jobs: int, processes: int, seconds: float) -> dict[str, Any]:
    """Claims per second when ``processes`` workers claim ``jobs`` distinct jobs.

    Each worker claims and releases its share of the jobs one after another,
    and stops early if ``seconds`` run out: the rate is what counts.
    """
    share = jobs // processes
    orders = [
        {
            "kind": "claim_many",
            "args": {"job_prefix": f"bulk-{index}", "count": share, "seconds": seconds},
        }
        for index in range(processes)
    ]
    with Workers(processes, 1) as workers:
        results, elapsed = workers.run_round(orders)
    refused = sum(result["refused"] for result in results)
    if refused:
        raise RuntimeError(f"{refused} claims of distinct jobs were refused")
    claimed = sum(result["claimed"] for result in results)
    return {
        "jobs": share * processes,
        "claimed": claimed,
        "processes": processes,
        "seconds": round(elapsed, 2),
        "claims_per_second": round(claimed / elapsed, 1),
    }
