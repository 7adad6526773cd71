"""The retention benchmark: years of history pruned by the schedulers themselves, as they run fires.

    python -m benchmarks.retention [--rows 1000000] [--hosts 3] [--jobs 10] [--every 10]
                                   [--retention-every 10] [--seconds 120]

Fills a scratch database of its own with ``--rows`` finished runs (one a
minute, from a month ago back: two years for a million, over 51 jobs) and as
many skips, then starts ``--hosts`` schedulers (``benchmarks.retention_host``)
over ``--jobs`` jobs each due every ``--every`` seconds, with
``JOBCLAIMS["RETENTION_EVERY"]`` at ``--retention-every`` seconds and the
default bounds (30 days, 10,000 rows per job). It reports how long the
schedulers took to bring the history within its bounds, every DELETE they
sent (how many, and how long each held its rows locked), how late the fires
were claimed while they pruned and after, whether each fire ran exactly once,
and whether the rows that guard each job's latest window were kept, so that
a claim of it is still refused. How late each fire was claimed is told
apart by where it was claimed: on the host running a pass (its retention
thread shares the process), on another host meanwhile, or with no pass
running. See docs/performance.md, Retention.
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
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.scratch import OUTPUT, percentiles, scratch_database, write_figures

#: Fires this close to the start or the end of the run may be seen by some
#: hosts only, and are left out.
MARGIN = 5.0


def main(argv: list[str]) -> int:
    options = _parser().parse_args(argv)
    with scratch_database() as name:
        results = _measure(options, name)
    from django.db import connection

    write_figures(results, OUTPUT / f"retention-{connection.vendor}.json", table(results))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.retention", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="Finished runs, and skips.")
    parser.add_argument("--hosts", type=int, default=3, help="Scheduler processes.")
    parser.add_argument("--jobs", type=int, default=10, help="Jobs the schedulers run.")
    parser.add_argument("--every", type=int, default=10, help="Seconds between fires.")
    parser.add_argument(
        "--retention-every", type=float, default=10, help="Seconds between retention passes."
    )
    parser.add_argument("--seconds", type=float, default=120, help="How long the fleet runs.")
    return parser


def _fill(rows: int) -> None:
    """``rows`` finished runs (``benchmarks.history``) and a skip for each."""
    from django.db import connection

    from benchmarks import history
    from jobclaims.models import JobSkip

    history.fill(connection, rows, "bench")
    quote = connection.ops.quote_name
    columns = ", ".join(map(quote, ("job", "window", "owner", "reason", "count", "skipped_at")))
    job, window, owner, at = map(quote, ("job", "window", "owner", "finished_at"))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {JobSkip._meta.db_table} ({columns}) "
            f"SELECT {job}, {window}, 'history', 'held', 1, {at} "
            f"FROM {history.TABLE} WHERE {owner} = 'history'"
        )
    history.analyze(connection)


def _measure(options: argparse.Namespace, database: str) -> dict[str, Any]:
    from django.db import connection
    from django.db.models import Max

    from jobclaims.models import JobRun, JobSkip
    from jobclaims.scheduling.retention import RETENTION_JOB
    from jobclaims.time.cron import CronSchedule

    filling = time.monotonic()
    _fill(options.rows)
    filled_in = time.monotonic() - filling
    finished = JobRun.objects.finished().filter(owner="history")
    groups = list(
        finished.values("job", "schedule").annotate(latest=Max("window"), last=Max("claimed_at"))
    )
    guards = {
        pk
        for group in groups
        for pk in finished.filter(job=group["job"], schedule=group["schedule"])
        .filter(window=group["latest"])
        .values_list("pk", flat=True)
        .union(
            finished.filter(claimed_at=group["last"], job=group["job"]).values_list("pk", flat=True)
        )
    }
    cron = CronSchedule(f"*/{options.every} * * * * *")
    folder = Path(tempfile.mkdtemp(prefix="retention-"))
    env = {
        **os.environ,
        "BENCH_DATABASE_NAME": database,
        "BENCH_RETENTION_EVERY": str(options.retention_every),
    }
    paths = [folder / f"host-{number}.json" for number in range(options.hosts)]
    started = datetime.datetime.now(datetime.timezone.utc)
    host = [sys.executable, "-m", "benchmarks.retention_host"]
    hosts = [
        subprocess.Popen(
            [*host, str(path), str(options.jobs), cron.expression],
            stdout=subprocess.DEVNULL,
            env=env,
        )
        for path in paths
    ]
    history_runs = JobRun.objects.filter(owner="history")
    history_skips = JobSkip.objects.filter(owner="history")
    bounded_at = None
    begun = time.monotonic()
    while time.monotonic() - begun < options.seconds:
        within = not history_skips.exists() and history_runs.count() <= len(guards)
        if bounded_at is None and within:
            bounded_at = datetime.datetime.now(datetime.timezone.utc)
        time.sleep(2)  # Each look reads the tables: seldom, to add little load.
    stop = next(cron.fires_after(datetime.datetime.now(datetime.timezone.utc)))
    time.sleep(max((stop - datetime.timedelta(seconds=1)).timestamp() - time.time(), 0))
    ended = datetime.datetime.now(datetime.timezone.utc)
    for host in hosts:
        host.send_signal(signal.SIGTERM)
    for host in hosts:
        host.wait(timeout=120)
    deletes = [
        (at, took, rows)
        for path in paths
        for at, took, rows in json.loads(Path(f"{path}.deletes").read_text())
    ]

    margin = datetime.timedelta(seconds=MARGIN)
    keys = {cron.key(fire): fire for fire in cron.fires_between(started + margin, ended - margin)}
    runs = list(JobRun.objects.filter(window__in=keys).exclude(job=RETENTION_JOB))
    once = Counter((run.job, run.window) for run in runs if run.status == "succeeded")
    passes = JobRun.objects.filter(job=RETENTION_JOB)
    # Each pass, by the process that ran it (host:pid) and when.
    spans = [
        (run.owner.rsplit(":", 1)[0], run.claimed_at, run.finished_at or ended) for run in passes
    ]
    late: dict[str, list[float]] = {"pruning host": [], "other hosts": [], "no pass": []}
    for run in runs:
        fire = keys[run.window]
        pruning = {process for process, start, end in spans if start <= fire <= end}
        if not pruning:
            when = "no pass"
        elif run.owner.rsplit(":", 1)[0] in pruning:
            when = "pruning host"
        else:
            when = "other hosts"
        late[when].append((run.claimed_at - fire).total_seconds())
    kept = set(history_runs.values_list("pk", flat=True))
    runs_left, skips_left = history_runs.count(), history_skips.count()
    # A succeeded window stays done: its claim is refused. (A failed one is
    # claimed again on purpose: that is how it is retried.)
    refused = all(
        JobRun.objects.claim(run.job, run.window, lease=datetime.timedelta(minutes=1)) is None
        for run in JobRun.objects.filter(pk__in=guards, status=JobRun.Status.SUCCEEDED)
    )
    durations = sorted(took for _at, took, _rows in deletes)
    return {
        "vendor": connection.vendor,
        "rows": options.rows,
        "filled_seconds": round(filled_in, 1),
        "hosts": options.hosts,
        "jobs": options.jobs,
        "every_seconds": options.every,
        "retention_every_seconds": options.retention_every,
        "seconds": options.seconds,
        "bounded_after_seconds": (
            round((bounded_at - started).total_seconds(), 1) if bounded_at else None
        ),
        "runs_left": runs_left,
        "skips_left": skips_left,
        "guards": len(guards),
        "guards_kept": kept == guards,
        "guarded_windows_refused": refused,
        "passes": passes.count(),
        "passes_hosts": len({run.owner.rsplit(":", 1)[0] for run in passes}),
        "deletes": len(deletes),
        "rows_per_delete": round(statistics.mean(rows for *_, rows in deletes), 1)
        if deletes
        else 0,
        "delete_ms": percentiles(durations, scale=1000, digits=1),
        "fires": options.jobs * len(keys),
        "fires_run_exactly_once": sum(1 for count in once.values() if count == 1),
        "fires_missed": options.jobs * len(keys) - len({(run.job, run.window) for run in runs}),
        "claim_after_fire_ms": {
            when: percentiles(sorted(each), scale=1000, digits=1) for when, each in late.items()
        },
        "claims_by_when": {when: len(each) for when, each in late.items()},
    }


def table(results: dict[str, Any]) -> str:
    deletes = results["delete_ms"]
    late = results["claim_after_fire_ms"]
    lines = [
        f"Retention: {results['rows']:,} runs and as many skips, {results['hosts']} schedulers "
        f"x {results['jobs']} jobs every {results['every_seconds']} s, a pass every "
        f"{results['retention_every_seconds']:g} s, for {results['seconds']:g} s "
        f"({results['vendor']}; filled in {results['filled_seconds']} s)",
        f"  within the bounds after             {results['bounded_after_seconds']} s "
        f"({results['runs_left']:,} runs left, the {results['guards']} guarding rows; "
        f"{results['skips_left']:,} skips)",
        f"  passes                              {results['passes']}, on "
        f"{results['passes_hosts']} hosts",
        f"  DELETEs                             {results['deletes']:,} of about "
        f"{results['rows_per_delete']:,} rows: p50 {deletes.get('p50')} ms, "
        f"p99 {deletes.get('p99')} ms, longest {deletes.get('max')} ms",
        f"  fires run exactly once              {results['fires_run_exactly_once']} of "
        f"{results['fires']} (missed: {results['fires_missed']})",
        *(
            f"  claim after the fire, {when + ',':14} p50 {late[when].get('p50')} ms, "
            f"p99 {late[when].get('p99')} ms, max {late[when].get('max')} ms "
            f"({results['claims_by_when'][when]} claims)"
            for when in late
        ),
        f"  guards kept; a claim of their succeeded windows refused  {results['guards_kept']}; "
        f"{results['guarded_windows_refused']}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
