"""The forked starts benchmark: many jobs due at one instant, forked or each a new interpreter.

    python -m benchmarks.forked_starts [--jobs 50] [--rounds 2]

Starts one scheduler (``benchmarks.scheduler_host starts``) over ``--jobs``
jobs that all fire every ``EVERY`` seconds, in a scratch database of its
own, and measures one instant per round: how long after the fire each job's
``run_job()`` began, and the CPU its process had used by then (for a forked
job, since its fork: its start's own cost). Rounds alternate between forked
starts and fresh interpreters, so that both meet the same machine. See
docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.scratch import OUTPUT, percentiles, rank, scratch_database, write_figures

#: Every job's period: the measured instant is the first one at least
#: ``SETTLE`` seconds after the scheduler started.
EVERY = 30
SETTLE = 5.0
#: How long after the measured instant its jobs are waited for.
LATEST = 90.0
HOWS = ("forked", "fresh interpreter")


def main(argv: list[str]) -> int:
    options = _parser().parse_args(argv)
    rounds: dict[str, list[dict[str, Any]]] = {how: [] for how in HOWS}
    with scratch_database() as name:
        env = {**os.environ, "BENCH_DATABASE_NAME": name}
        for number in range(options.rounds * len(HOWS)):
            how = HOWS[number % len(HOWS)]
            rounds[how].append(_round(how, options.jobs, env))
    from django.db import connection

    results = {how: _summary(measured, options.jobs) for how, measured in rounds.items()}
    write_figures(results, OUTPUT / "forked-starts.json", table(results, connection.vendor))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.forked_starts", description=__doc__)
    parser.add_argument("--jobs", type=int, default=50, help="Jobs due at one instant.")
    parser.add_argument("--rounds", type=int, default=2, help="Instants measured per way.")
    return parser


def _round(how: str, jobs: int, env: dict[str, str]) -> dict[str, Any]:
    """One scheduler, one instant: when each job began, and its CPU by then."""
    from jobclaims.time.clock import database_now

    with tempfile.TemporaryDirectory() as scratch:
        entries = Path(scratch) / "entries"
        host_env = {**env, "BENCH_ENTRIES": str(entries)}
        if how != "forked":
            host_env["BENCH_FRESH"] = "1"
        expression = f"*/{EVERY} * * * * *"
        host_argv = ["starts", os.devnull, str(jobs), expression]
        host = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.scheduler_host", *host_argv],
            env=host_env,
        )
        try:
            instant = _next_instant(database_now() + datetime.timedelta(seconds=SETTLE))
            began = _entries_of(entries, instant, jobs)
        finally:
            host.send_signal(signal.SIGTERM)
            host.wait(timeout=120)
    from jobclaims.models import JobRun

    fire = instant.timestamp()
    claimed = JobRun.objects.filter(window__in={entry["window"] for entry in began})
    return {
        "instant": instant.isoformat(),
        "began": len(began),
        "claimed_after_fire_s": sorted(
            (at - instant).total_seconds() for at in claimed.values_list("claimed_at", flat=True)
        ),
        "after_fire_s": sorted(entry["at"] - fire for entry in began),
        "cpu_s": sorted(entry["cpu"] for entry in began),
    }


def _entries_of(path: Path, instant: datetime.datetime, jobs: int) -> list[dict[str, Any]]:
    """What the jobs of ``instant`` recorded as they began, once all did (or
    ``LATEST`` passed)."""
    from jobclaims.time import wall_times

    deadline = instant.timestamp() + LATEST
    while True:
        # A line being appended is read whole at the next look.
        lines = path.read_text().splitlines(keepends=True) if path.exists() else []
        entries = [json.loads(line) for line in lines if line.endswith("\n")]
        began = [entry for entry in entries if wall_times.parse(entry["window"]) == instant]
        if len(began) >= jobs or time.time() > deadline:
            return began
        time.sleep(0.5)


def _next_instant(after: datetime.datetime) -> datetime.datetime:
    seconds = (after.second // EVERY + 1) * EVERY
    return after.replace(second=0, microsecond=0) + datetime.timedelta(seconds=seconds)


def _summary(measured: list[dict[str, Any]], jobs: int) -> dict[str, Any]:
    delays = sorted(value for each in measured for value in each["after_fire_s"])
    claims = sorted(value for each in measured for value in each["claimed_after_fire_s"])
    cpu = sorted(value for each in measured for value in each["cpu_s"])
    return {
        "instants": len(measured),
        "jobs_per_instant": jobs,
        "began": sum(each["began"] for each in measured),
        "claimed_after_fire_s": percentiles(claims),
        "run_job_after_fire_s": percentiles(delays),
        "cpu_at_run_job_ms": {
            "median": round(statistics.median(cpu) * 1000, 1) if cpu else None,
            "p99": round(rank(cpu, 0.99) * 1000, 1) if cpu else None,
        },
    }


def table(results: dict[str, dict[str, Any]], vendor: str) -> str:
    lines = [
        f"Jobs due at one instant, started by one scheduler on {vendor} "
        f"({os.cpu_count()} CPUs), run_job() entered after the fire:",
        f"{'start':<20}{'began':>10}{'claim p99':>11}{'p50 s':>9}{'p99 s':>9}{'max s':>9}"
        f"{'CPU med ms':>12}{'CPU p99 ms':>12}",
    ]
    for how, summary in results.items():
        delay, cpu = summary["run_job_after_fire_s"], summary["cpu_at_run_job_ms"]
        claim = summary["claimed_after_fire_s"]
        expected = summary["instants"] * summary["jobs_per_instant"]
        lines.append(
            f"{how:<20}{summary['began']:>5}/{expected:<4}{claim.get('p99', '-'):>11}"
            f"{delay.get('p50', '-'):>9}"
            f"{delay.get('p99', '-'):>9}{delay.get('max', '-'):>9}"
            f"{cpu['median'] or '-':>12}{cpu['p99'] or '-':>12}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
