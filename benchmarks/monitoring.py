"""What health and a metrics scrape cost for 10, 100 and 1,000 jobs over 100k rows.

    python -m benchmarks.monitoring [--rows N] [--jobs 10,100,1000] [--rounds N]

For each number of jobs the claims table is filled with ``--rows`` finished
hourly runs spread over the jobs (one in a hundred failed; one job in ten
is overdue), then ``read_health()`` and a scrape of the health gauges are
run ``--rounds`` times. It prints the queries each sends, which must not
grow with the jobs, and their median time, then whether the targets hold:
the same queries for every number of jobs, and a scrape of 1,000 jobs in
at most 200 ms (the target is PostgreSQL's; the others are shown beside
it). A scratch database of its own is created and dropped, as
``python -m benchmarks`` does.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
from pathlib import Path
from time import perf_counter, process_time

import django

HOUR = datetime.timedelta(hours=1)

#: Queries, median milliseconds, median milliseconds of this process's CPU.
Timing = tuple[int, float, float]


def main(argv: list[str]) -> int:
    options = _parser().parse_args(argv)
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    django.setup()
    from django.db import connection

    if connection.vendor == "sqlite":
        Path(connection.settings_dict["TEST"]["NAME"]).parent.mkdir(exist_ok=True)
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        print(f"{connection.vendor}, {options.rows:,} rows, median of {options.rounds} rounds")
        print(
            f"{'jobs':>6}  {'health q':>8}  {'health ms':>9}  {'cpu ms':>6}"
            f"  {'scrape q':>8}  {'scrape ms':>9}  {'cpu ms':>6}"
        )
        measured = {}
        for jobs in options.jobs:
            _fill(options.rows, jobs)
            health, scrape = measured[jobs] = _measure(options.rounds)
            print(
                f"{jobs:>6}  {health[0]:>8}  {health[1]:>9.1f}  {health[2]:>6.1f}"
                f"  {scrape[0]:>8}  {scrape[1]:>9.1f}  {scrape[2]:>6.1f}"
            )
        _verdicts(measured)
    finally:
        connection.creation.destroy_test_db(name, verbosity=0)
    return 0


#: A scrape of this many jobs must take at most ``SCRAPE_TARGET_MS``.
TARGET_JOBS = 1000
SCRAPE_TARGET_MS = 200.0


def _verdicts(measured: dict[int, tuple[Timing, Timing]]) -> None:
    """Whether the queries stayed constant, and the scrape of 1,000 jobs within its target."""
    queries = sorted({n for health, scrape in measured.values() for n in (health[0], scrape[0])})
    constant = "met" if len(queries) == 1 else "missed"
    shown = ", ".join(map(str, queries))
    print(f"queries per health read and per scrape constant ({shown}): {constant}")
    if TARGET_JOBS in measured:
        took = measured[TARGET_JOBS][1][1]
        verdict = "met" if took <= SCRAPE_TARGET_MS else "missed"
        print(
            f"scrape of {TARGET_JOBS:,} jobs {took:.1f} ms, <= {SCRAPE_TARGET_MS:.0f} ms: {verdict}"
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.monitoring", description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000, help="Claims in the table.")
    parser.add_argument(
        "--jobs",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[10, 100, 1000],
        help="Numbers of jobs, comma-separated (default: 10,100,1000).",
    )
    parser.add_argument("--rounds", type=int, default=5, help="Runs of each, for the median.")
    return parser


def _fill(rows: int, jobs: int) -> None:
    """``rows`` finished hourly runs of ``jobs`` jobs, the newest in the last hour."""
    from jobclaims.clock import database_now
    from jobclaims.models import JobRun
    from jobclaims.windows import resolve

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


def _measure(rounds: int) -> tuple[Timing, Timing]:
    from prometheus_client import CollectorRegistry, generate_latest

    from jobclaims.contrib.prometheus.metrics import HealthCollector
    from jobclaims.health import read_health

    def scrape() -> None:
        registry = CollectorRegistry()
        registry.register(HealthCollector())
        generate_latest(registry)

    return _timed(read_health, rounds), _timed(scrape, rounds)


def _timed(work, rounds: int) -> Timing:
    """Queries of one run of ``work``, and its median time and this
    process's median CPU time in it, in milliseconds: on a loaded machine
    the difference is the database's time and the wait for a CPU."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        work()
    times, cpu = [], []
    for _ in range(rounds):
        started, started_cpu = perf_counter(), process_time()
        work()
        times.append((perf_counter() - started) * 1000)
        cpu.append((process_time() - started_cpu) * 1000)
    return len(captured.captured_queries), statistics.median(times), statistics.median(cpu)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
