"""How a fleet's claims grow with its jobs and its hosts.

    python -m benchmarks.fleet_scaling [--jobs 200,1000,5000] [--hosts 1,3,6] [--every 15]
        [--seconds 70] [--one-by-one]

Runs the fleet benchmark (``benchmarks.fleet``) with ``--claims-only`` at
each size, every job due every ``--every`` seconds, each size in a fresh
scratch database, and prints a row per size: the fires run exactly once,
how long after its fire each claim landed, the statements a host sent per
instant, and the schedulers' CPU. With ``--one-by-one`` too, each size runs again with each
fire claimed in turn, as before batches, side by side. See
docs/performance.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks import fleet
from benchmarks.scratch import OUTPUT, scratch_database, write_figures


def main(argv: list[str]) -> int:
    options = _parser().parse_args(argv)
    rows = []
    for jobs in options.jobs:
        for hosts in options.hosts:
            for one_by_one in [False, True] if options.one_by_one else [False]:
                size = argparse.Namespace(
                    hosts=hosts,
                    jobs=jobs,
                    every=options.every,
                    seconds=options.seconds,
                    claims_only=True,
                    one_by_one=one_by_one,
                )
                with scratch_database() as name:
                    rows.append(fleet._measure(size, name))
                print(_row(rows[-1]), flush=True)
    from django.db import connection

    results = {"vendor": connection.vendor, "sizes": rows}
    write_figures(results, OUTPUT / f"fleet-scaling-{connection.vendor}.json", table(rows))
    return 0


def _parser() -> argparse.ArgumentParser:
    def numbers(text: str) -> list[int]:
        return [int(each) for each in text.split(",")]

    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet_scaling", description=__doc__)
    parser.add_argument("--jobs", type=numbers, default=[200, 1000, 5000], help="Job counts.")
    parser.add_argument("--hosts", type=numbers, default=[1, 3, 6], help="Scheduler counts.")
    parser.add_argument("--every", type=int, default=15, help="Seconds between fires.")
    parser.add_argument("--seconds", type=float, default=70, help="How long each fleet runs.")
    parser.add_argument(
        "--one-by-one", action="store_true", help="Each size again, each fire claimed in turn."
    )
    return parser


HEADER = (
    "jobs   hosts  claims        once        claim after fire p50 / p99 / max ms"
    "   lost-all host: statements/instant   won-some host   CPU/host"
)


def _row(results: dict[str, Any]) -> str:
    claim = results["claim_after_fire_ms"]
    lost = results["statements_per_instant_lost_whole"]
    won = results["statements_per_instant_won_some"]
    how = "one by one" if results["one_by_one"] else "in batches"
    return (
        f"{results['jobs']:<6} {results['hosts']:<6} {how:<13} "
        f"{results['fires_run_exactly_once']}/{results['fires']:<8} "
        f"{claim.get('p50')} / {claim.get('p99')} / {claim.get('max')}".ljust(80)
        + f" {lost['mean']} (max {lost['max']})".ljust(35)
        + f" {won['mean']} (max {won['max']})".ljust(16)
        + f" {100 * results['scheduler_cpu_share_of_a_core']:.2f}%"
    )


def table(rows: list[dict[str, Any]]) -> str:
    return "\n".join([HEADER, *(_row(results) for results in rows)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
