"""The fleet benchmark: several schedulers over many jobs, as a deployment runs them.

    python -m benchmarks.fleet [--hosts 3] [--jobs 50] [--every 30] [--seconds 180]

Starts ``--hosts`` scheduler processes ("hosts") over ``--jobs`` jobs that
each fire every ``--every`` seconds, for ``--seconds``, in a scratch
database of its own, then reports: the fires that ran exactly once, how long
after its fire time each claim was taken and each job had run, what a host
that lost a fire sent and wrote, the schedulers' CPU, busy and idle, and the
JobSkip rows a day of this would add. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.scratch import OUTPUT, percentiles, scratch_database, write_figures

#: Fires this close to the start or the end of the run may be seen by some
#: hosts only, and are left out.
MARGIN = 5.0
DAY = 86400


def main(argv: list[str]) -> int:
    options = _parser().parse_args(argv)
    with scratch_database() as name:
        results = _measure(options, name)
    from django.db import connection

    write_figures(results, OUTPUT / f"fleet-{connection.vendor}.json", table(results))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__)
    parser.add_argument("--hosts", type=int, default=3, help="Scheduler processes.")
    parser.add_argument("--jobs", type=int, default=50, help="Jobs, all on the same schedule.")
    parser.add_argument("--every", type=int, default=30, help="Seconds between fires (divides 60).")
    parser.add_argument("--seconds", type=float, default=180, help="How long the fleet runs.")
    parser.add_argument(
        "--claims-only",
        action="store_true",
        help="Record each won fire succeeded in its scheduler, starting no process: "
        "the claims alone, at fleet sizes whose processes two cores could not start.",
    )
    parser.add_argument(
        "--one-by-one",
        action="store_true",
        help="Claim each fire in turn, as before batches, for a side-by-side figure.",
    )
    return parser


def _measure(options: argparse.Namespace, database: str) -> dict[str, Any]:
    from django.db import connection
    from django.db.models import Sum

    from jobclaims.models import JobRun, JobSkip
    from jobclaims.time.cron import CronSchedule

    cron = CronSchedule(f"*/{options.every} * * * * *")
    folder = Path(tempfile.mkdtemp(prefix="fleet-"))
    env = {**os.environ, "BENCH_DATABASE_NAME": database}
    for flag, variable in [
        ("claims_only", "BENCH_CLAIMS_ONLY"),
        ("one_by_one", "BENCH_ONE_BY_ONE"),
    ]:
        if getattr(options, flag):
            env[variable] = "1"
    paths = [folder / f"host-{number}.json" for number in range(options.hosts)]
    hosts = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.fleet_host",
                str(path),
                str(options.jobs),
                cron.expression,
            ],
            stdout=subprocess.DEVNULL,
            env=env,
        )
        for path in paths
    ]
    started = datetime.datetime.now(datetime.timezone.utc)
    # Stopped a second before a fire, when the last fire's jobs have ended:
    # stopped among them, they would record their claims failed.
    stop = next(cron.fires_after(started + datetime.timedelta(seconds=options.seconds)))
    time.sleep((stop - datetime.timedelta(seconds=1) - started).total_seconds())
    ended = datetime.datetime.now(datetime.timezone.utc)
    for host in hosts:
        host.send_signal(signal.SIGTERM)
    for host in hosts:
        host.wait(timeout=120)
    figures = [json.loads(path.read_text()) for path in paths]

    margin = datetime.timedelta(seconds=MARGIN)
    fires = cron.fires_between(started + margin, ended - margin)
    keys = {cron.key(fire): fire for fire in fires}
    # The fleet's jobs only: the schedulers' own hourly history pass claims too.
    runs = list(JobRun.objects.filter(window__in=keys, job__startswith="fleet_"))
    per_fire = Counter((run.job, run.window) for run in runs if run.status == "succeeded")
    expected = options.jobs * len(keys)
    once = sum(1 for count in per_fire.values() if count == 1)
    claimed_after = sorted((run.claimed_at - keys[run.window]).total_seconds() for run in runs)
    ran_after = sorted(
        (run.finished_at - keys[run.window]).total_seconds() for run in runs if run.finished_at
    )
    skipped = JobSkip.objects.filter(window__in=keys, job__startswith="fleet_")
    skip_rows = skipped.count()
    skips_counted = skipped.aggregate(n=Sum("count"))["n"] or 0

    instants = [instant for host in figures for instant in host["instants"]]
    lost_all = [len(i["statements"]) for i in instants if i["lost"] and not i["won"]]
    won_some = [len(i["statements"]) for i in instants if i["won"]]
    lost_kinds = Counter(
        kind for i in instants if i["lost"] and not i["won"] for kind in i["statements"]
    )
    lost_claims = sum(host["lost"] for host in figures)
    busy_cpu = sum(host["cpu_seconds"] for host in figures)
    wall = options.seconds
    fires_per_day = DAY / options.every * options.jobs
    return {
        "vendor": connection.vendor,
        "hosts": options.hosts,
        "claims_only": options.claims_only,
        "one_by_one": options.one_by_one,
        "jobs": options.jobs,
        "every_seconds": options.every,
        "seconds": options.seconds,
        "fires": expected,
        "fires_run_exactly_once": once,
        "fires_missed": expected - len({(run.job, run.window) for run in runs}),
        "fires_failed": sum(1 for run in runs if run.status != "succeeded"),
        "claim_after_fire_ms": percentiles(claimed_after, scale=1000, digits=1),
        "job_done_after_fire_ms": percentiles(ran_after, scale=1000, digits=1),
        "lost_claims": lost_claims,
        # A host's claims at one instant (a look that claimed): all it
        # sent for them, however many fires were due.
        "instants_lost_whole": len(lost_all),
        "statements_per_instant_lost_whole": _spread(lost_all),
        "statements_per_instant_lost_whole_by_kind": {
            kind: round(count / max(len(lost_all), 1), 2) for kind, count in lost_kinds.items()
        },
        "statements_per_instant_won_some": _spread(won_some),
        "fires_per_instant": _spread([i["won"] + i["lost"] for i in instants]),
        # Each lost claim adds one to its window's JobSkip row (one per
        # window and reason), inserting it if it is the window's first.
        "skips_counted_per_lost_claim": round(skips_counted / max(lost_claims, 1), 2),
        "skip_rows_per_fire": round(skip_rows / max(len(runs), 1), 2),
        "processes_started_by_losers": 0,
        "scheduler_cpu_seconds": round(busy_cpu, 2),
        "scheduler_cpu_share_of_a_core": round(busy_cpu / wall / options.hosts, 4),
        "jobs_cpu_seconds": round(sum(host["children_cpu_seconds"] for host in figures), 2),
        "idle_cpu_share_of_a_core": _idle_share(figures, options.every),
        "skip_rows_per_day": round(fires_per_day * skip_rows / max(len(runs), 1)),
        "runs_per_day": round(fires_per_day),
    }


def _spread(counts: list[int]) -> dict[str, float]:
    """The mean and the most of ``counts``."""
    if not counts:
        return {"mean": 0.0, "max": 0}
    return {"mean": round(sum(counts) / len(counts), 2), "max": max(counts)}


def _idle_share(figures: list[dict[str, Any]], every: int) -> float:
    """CPU per second of wall time over the spans with no job running, between fires."""
    cpu = wall = 0.0
    for host in figures:
        samples = host["samples"]
        for (t0, c0, n0), (t1, c1, n1) in itertools.pairwise(samples):
            # Leave out the half second around a fire, when the host claims.
            quiet = not n0 and not n1 and (t0 % every) > 1.5 and (t1 % every) < every - 0.5
            quiet = quiet and t1 - t0 < 1
            if quiet:
                cpu += c1 - c0
                wall += t1 - t0
    return round(cpu / wall, 4) if wall else 0.0


def table(results: dict[str, Any]) -> str:
    claim = results["claim_after_fire_ms"]
    done = results["job_done_after_fire_ms"]
    lost_whole = results["statements_per_instant_lost_whole"]
    won_some = results["statements_per_instant_won_some"]
    lines = [
        f"Fleet: {results['hosts']} schedulers x {results['jobs']} jobs, each due every "
        f"{results['every_seconds']} s, for {results['seconds']:g} s ({results['vendor']})"
        + (", claims only (no process started)" if results["claims_only"] else "")
        + (", each fire claimed in turn" if results["one_by_one"] else ", claims in batches"),
        f"  fires run exactly once            {results['fires_run_exactly_once']} of "
        f"{results['fires']} (missed: {results['fires_missed']}, "
        f"failed: {results['fires_failed']})",
        f"  claim taken after the fire time   p50 {claim.get('p50')} ms, p99 {claim.get('p99')} ms "
        f"(target <= 1,000 at 1,000 jobs), max {claim.get('max')} ms",
        f"  job done after the fire time      p50 {done.get('p50')} ms, p99 {done.get('p99')} ms, "
        f"max {done.get('max')} ms",
        f"  fires due at an instant           {results['fires_per_instant']['max']} "
        f"(mean {results['fires_per_instant']['mean']} per host's look)",
        f"  a host that lost them all         {lost_whole['mean']} statements per instant, "
        f"at most {lost_whole['max']} (target <= 2) "
        f"{results['statements_per_instant_lost_whole_by_kind']}, "
        f"{results['skips_counted_per_lost_claim']} skips counted per fire, no process started",
        f"  a host that won some              {won_some['mean']} statements per instant, "
        f"at most {won_some['max']} (target <= 3), then its processes",
        f"  schedulers' CPU                   {results['scheduler_cpu_seconds']} s in all, "
        f"{100 * results['scheduler_cpu_share_of_a_core']:.2f}% of a core each; the jobs' "
        f"processes {results['jobs_cpu_seconds']} s",
        f"  a scheduler's CPU while idle      {100 * results['idle_cpu_share_of_a_core']:.3f}% "
        "of a core (target <= 1%)",
        f"  JobSkip rows added per day        {results['skip_rows_per_day']:,} "
        f"({results['skip_rows_per_fire']} per fire, each counting that fire's skips) "
        f"(and {results['runs_per_day']:,} JobRun rows): jobclaims_prune --older-than 1d daily "
        "keeps about one day of them",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
