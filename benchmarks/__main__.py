"""Run the claim benchmark against the database DATABASE_URL names.

    python -m benchmarks [--history-rows N] [--jobs N] [--json PATH] ...

The benchmark creates a scratch database of its own (Django's test-database
machinery, under a name of its own), measures, prints a table, writes the
same figures as JSON, and drops the database, whatever happens.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter
from typing import Any

from benchmarks import report
from benchmarks.scratch import OUTPUT, scratch_database, write_figures

#: Processes in the throughput step.
THROUGHPUT_PROCESSES = 2
#: (processes, rounds) of each race.
RACES = ((2, 20), (8, 8), (32, 16))


def main(argv: list[str]) -> int:
    options = _parser().parse_args(argv)
    started = perf_counter()
    with scratch_database():
        from django.db import connection

        results = _measure(connection, options)
    results["seconds"] = round(perf_counter() - started, 1)
    path = options.json or OUTPUT / f"bench-{connection.vendor}.json"
    write_figures(results, path, report.table(results))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time claim() against the database's own floor.",
    )
    parser.add_argument(
        "--history-rows",
        type=int,
        default=1_000_000,
        help="Finished claims to pile up for the history and prune steps.",
    )
    parser.add_argument(
        "--jobs", type=int, default=10_000, help="Distinct jobs the throughput step claims."
    )
    parser.add_argument(
        "--throughput-budget",
        type=float,
        default=45,
        help="Seconds the throughput step may run before its workers stop.",
    )
    parser.add_argument(
        "--prune-budget",
        type=float,
        default=45,
        help="Seconds the prune step may run before it is stopped and judged.",
    )
    parser.add_argument(
        "--contention-only",
        action="store_true",
        help="Run only the floor, the uncontended claims beside it, and the races.",
    )
    parser.add_argument(
        "--claims-only",
        action="store_true",
        help="Run only the floor, and each public way to claim beside it.",
    )
    parser.add_argument(
        "--json", type=Path, help="Where to write the figures (test-output/bench-VENDOR.json)."
    )
    return parser


def _measure(connection: Any, options: argparse.Namespace) -> dict[str, Any]:
    from benchmarks import contention, machine, pruning, uncontended
    from benchmarks.floor import floor_table
    from benchmarks.targets import check

    results: dict[str, Any] = {
        "database": machine.database(connection),
        "machine": machine.describe(),
        "code": machine.code(),
        "step_seconds": {},
    }
    steps = results["step_seconds"]
    claims = uncontended.ClaimCycles("bench")
    with floor_table(connection):
        with _step(steps, "uncontended"):
            results.update(_uncontended(connection, claims))
        if options.claims_only:
            results["machine"]["load_average_after"] = machine.load_average()
            results["targets"] = check(results)
            return results
        results["contention"] = []
        for processes, rounds in RACES:
            with _step(steps, f"race of {processes}"):
                results["contention"].append(contention.race(processes, rounds=rounds))
        if not options.contention_only:
            with _step(steps, "throughput"):
                results["throughput"] = contention.throughput(
                    options.jobs, THROUGHPUT_PROCESSES, options.throughput_budget
                )
            with _step(steps, "history"):
                results["history"] = _history(connection, claims, options.history_rows)
    if not options.contention_only:
        with _step(steps, "prune"):
            results["prune"] = pruning.timed_prune(connection, options.prune_budget)
    results["machine"]["load_average_after"] = machine.load_average()
    results["targets"] = check(results)
    return results


def _uncontended(connection: Any, claims: Any) -> dict[str, Any]:
    """Sections 1 and 2: the floor, and claim() and every other public way
    to claim beside it, in the same rounds."""
    from benchmarks import peers, uncontended

    paths = uncontended.public_paths()
    hosts = uncontended.host_calls()
    others = peers.peers(connection)
    timed = uncontended.claim_against_floor(
        connection,
        claims,
        rounds=200,
        per_round=4,
        warmup=30,
        seconds=40,
        paths={**paths, **hosts, **{name: peer.cycle for name, peer in others.items()}},
    )
    counts = uncontended.statements_per_cycle(connection, claims)
    return {
        "floor": {
            "round_trip": timed.samples("round_trip", "statement").summary(),
            "claim": timed.samples("floor", "claim").summary(),
            "claim_and_release": timed.samples("floor", "cycle").summary(),
            "cpu": timed.samples("floor", "cpu").summary(),
            "round_trips": counts.pop("floor_round_trips"),
        },
        "uncontended": {
            "claim": timed.samples("claim", "claim").summary(),
            "claim_and_release": timed.samples("claim", "cycle").summary(),
            "cpu": timed.samples("claim", "cpu").summary(),
            **counts,
            "ratio_to_floor": round(timed.ratio("claim", "floor"), 2),
        },
        "paths": {
            name: uncontended.figures(timed, name, uncontended.statements_of(connection, cycle))
            for name, cycle in paths.items()
        },
        "hosts": {
            name: {
                "path": path,
                **uncontended.figures(timed, name, []),
                "path_less_host_to_floor": round(timed.difference_ratio(path, name, "floor"), 2),
            }
            for path, name in uncontended.HOSTS.items()
            if name in hosts and path in paths
        },
        "peers": {
            name: {
                **uncontended.figures(timed, name, peer.statements),
                "correct": peer.correct,
                "why": peer.why,
            }
            for name, peer in others.items()
        },
        "peers_left_out": peers.missing(connection),
    }


def _history(connection: Any, claims: Any, rows: int) -> dict[str, Any]:
    """Claim + release on an empty table, then beside ``rows`` of history.

    Each phase is timed against the floor, round by round; the floor's
    table stays small, so it tracks only how fast the machine is at the
    time, and comparing the two phases' ratios to it takes the machine's
    drift between the phases out of the result.
    """
    from benchmarks import history, uncontended

    history.empty(connection)
    empty = uncontended.claim_against_floor(
        connection, claims, rounds=100, per_round=4, warmup=10, seconds=12
    )
    started = perf_counter()
    history.fill(connection, rows, claims.job)
    fill_seconds = round(perf_counter() - started, 1)
    full = uncontended.claim_against_floor(
        connection, claims, rounds=100, per_round=4, warmup=10, seconds=12
    )
    before, after = empty.samples("claim", "cycle"), full.samples("claim", "cycle")
    floor_before, floor_after = empty.samples("floor", "cycle"), full.samples("floor", "cycle")
    return {
        "rows": rows,
        "fill_seconds": fill_seconds,
        "empty": before.summary(),
        "full": after.summary(),
        "floor_empty": floor_before.summary(),
        "floor_full": floor_after.summary(),
        "raw_ratio": _ratio(after.median, before.median),
        "floor_drift": _ratio(floor_after.median, floor_before.median),
        "ratio_to_floor_empty": round(empty.ratio("claim", "floor"), 2),
        "ratio_to_floor_full": round(full.ratio("claim", "floor"), 2),
        "ratio": round(full.ratio("claim", "floor") / empty.ratio("claim", "floor"), 2),
        "plan": history.claim_query_plan(connection, claims.job, "explained"),
    }


def _ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 2)


@contextmanager
def _step(steps: dict[str, float], name: str) -> Iterator[None]:
    """Say which step runs (on stderr), and record how long it took."""
    print(f"... {name}", file=sys.stderr, flush=True)
    started = perf_counter()
    yield
    steps[name] = round(perf_counter() - started, 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
