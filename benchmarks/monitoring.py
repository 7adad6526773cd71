"""What a scrape of the metrics view costs for 100, 1,000 and 5,000 jobs over
100k rows: its time, the SQL's part and Python's, quiet and under load.

    python -m benchmarks.monitoring [--rows N] [--jobs 100,1000,5000] [--rounds N] [--load N]

For each number of jobs the claims table is filled with ``--rows`` finished
hourly runs spread over the jobs (one in a hundred failed; one job in ten
is overdue), then the metrics view is called ``--rounds`` times, as a scrape
calls it: the health reads, bounded by ``HEALTH_TIMEOUT``, and the gauges'
text. It prints the queries a scrape sends, which must not grow with the
jobs, and the median of each round's time, of its SQL (each statement from
its sending to the database's whole answer received; SQLite's engine runs
as its rows are read, so there the SQL is counted as Python), of its Python
(the rest) and of this process's CPU. ``--load N`` keeps N processes busy on the
CPUs while it measures, as a busy host would (``--load 8`` on two cores is
the load the targets name). It ends with the verdicts: the same queries for
every number of jobs, and a scrape of 1,000 jobs within 200 ms quiet and
within 1 s at load 8 (the targets are PostgreSQL's; the others are shown
beside it). A scratch database of its own is created and dropped, as
``python -m benchmarks`` does.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import perf_counter, process_time
from typing import Any, NamedTuple

from benchmarks.scratch import scratch_database

HOUR = datetime.timedelta(hours=1)


class Timing(NamedTuple):
    """One scrape's queries, and the medians of its rounds, in milliseconds."""

    queries: int
    total: float
    sql: float
    python: float
    cpu: float


def main(argv: list[str]) -> int:
    options = _parser().parse_args(argv)
    with scratch_database():
        from django.db import connection

        with _busy(options.load):
            print(
                f"{connection.vendor}, {options.rows:,} rows, median of {options.rounds} rounds, "
                f"{options.load} busy processes, load average {os.getloadavg()[0]:.1f} "
                f"on {os.cpu_count()} CPUs at the start"
            )
            print(
                f"{'jobs':>6}  {'queries':>7}  {'scrape ms':>9}  {'SQL ms':>7}  {'Python ms':>9}"
                f"  {'CPU ms':>7}"
            )
            measured = {}
            for jobs in options.jobs:
                _fill(options.rows, jobs)
                timing = measured[jobs] = _measure(options.rounds)
                print(
                    f"{jobs:>6}  {timing.queries:>7}  {timing.total:>9.1f}  {timing.sql:>7.1f}"
                    f"  {timing.python:>9.1f}  {timing.cpu:>7.1f}"
                )
            print(f"load average {os.getloadavg()[0]:.1f} at the end")
        _verdicts(measured, options.load)
    return 0


#: A scrape of this many jobs must take at most ``SCRAPE_TARGET_MS`` on a
#: quiet machine, and ``LOADED_TARGET_MS`` with ``LOAD`` processes busy.
TARGET_JOBS = 1000
SCRAPE_TARGET_MS = 200.0
LOAD = 8
LOADED_TARGET_MS = 1000.0


def _verdicts(measured: dict[int, Timing], load: int) -> None:
    """Whether the queries stayed constant, and the scrape of 1,000 jobs within its target."""
    queries = sorted({timing.queries for timing in measured.values()})
    constant = "met" if len(queries) == 1 else "missed"
    shown = ", ".join(map(str, queries))
    print(f"queries per scrape constant ({shown}): {constant}")
    if TARGET_JOBS in measured:
        took = measured[TARGET_JOBS].total
        # The targets name a load; the machine's own is printed above, for a
        # verdict without busy processes on a busy machine says little.
        target, where = (
            (LOADED_TARGET_MS, f"with {load} busy processes (target: load {LOAD})")
            if load >= LOAD
            else (SCRAPE_TARGET_MS, "with no busy processes (target: a quiet machine)")
        )
        verdict = "met" if took <= target else "missed"
        print(
            f"scrape of {TARGET_JOBS:,} jobs {where} {took:.1f} ms, <= {target:.0f} ms: {verdict}"
        )


def _jobs(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.monitoring", description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000, help="Claims in the table.")
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default=[100, 1000, 5000],
        help="Numbers of jobs, comma-separated (default: 100,1000,5000).",
    )
    parser.add_argument("--rounds", type=int, default=5, help="Scrapes of each, for the median.")
    parser.add_argument(
        "--load", type=int, default=0, help="Processes kept busy meanwhile (default: none)."
    )
    return parser


def _spin() -> None:
    while True:
        pass


@contextmanager
def _busy(processes: int) -> Iterator[None]:
    """``processes`` processes that keep a CPU busy each, until the block ends."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(processes)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.join()


def _fill(rows: int, jobs: int) -> None:
    """``rows`` finished hourly runs of ``jobs`` jobs, the newest in the last hour."""
    from jobclaims.models import JobRun
    from jobclaims.time.clock import database_now
    from jobclaims.time.windows import resolve

    JobRun.objects.all().delete()
    hourly = resolve("hourly")
    now = database_now()
    per_job = max(rows // jobs, 1)
    batch: list[JobRun] = []
    for job in range(jobs):
        # One job in ten stopped a day ago: overdue.
        newest = now - (24 * HOUR if job % 10 == 9 else datetime.timedelta())
        for age in range(per_job):
            claimed = newest - age * HOUR
            batch.append(
                JobRun(
                    job=f"job_{job:04}",
                    window=hourly.key_at(claimed),
                    schedule="hourly",
                    owner="bench:1:0c0ffee0",
                    status="failed" if age % 100 == 99 else "succeeded",
                    claimed_at=claimed,
                    expires_at=claimed + HOUR,
                    finished_at=claimed + datetime.timedelta(seconds=5),
                )
            )
            if len(batch) >= 5000:
                JobRun.objects.bulk_create(batch)
                batch = []
    JobRun.objects.bulk_create(batch)


def _measure(rounds: int) -> Timing:
    """A scrape of the metrics view, as Prometheus calls it."""
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext

    from jobclaims.contrib.prometheus.views import metrics

    request = RequestFactory().get("/metrics/")

    def scrape() -> None:
        response = metrics(request)
        assert b"jobclaims_up 1.0" in response.content, "the health reads did not answer"

    with CaptureQueriesContext(connection) as captured:
        scrape()
    totals, sqls, cpus = [], [], []
    for _ in range(rounds):
        with _sql_time(connection) as sql:
            started, started_cpu = perf_counter(), process_time()
            scrape()
            totals.append((perf_counter() - started) * 1000)
            cpus.append((process_time() - started_cpu) * 1000)
        sqls.append(sum(sql) * 1000)
    pythons = [total - sql for total, sql in zip(totals, sqls, strict=True)]
    return Timing(
        len(captured.captured_queries),
        statistics.median(totals),
        statistics.median(sqls),
        statistics.median(pythons),
        statistics.median(cpus),
    )


@contextmanager
def _sql_time(connection: Any) -> Iterator[list[float]]:
    """The seconds each statement took, from its sending to its answer received."""
    spent: list[float] = []

    def timed(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent.append(time.perf_counter() - started)

    with connection.execute_wrapper(timed):
        yield spent


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
