"""The costs benchmark: what grew with the number of jobs, and what the metrics app added.

    python -m benchmarks.costs [--load 200,1000] [--idle 5,200,1000,5000] ...

In a scratch database of its own, prints side by side in one run (issue 40):

1. **Loading scheduled jobs**: the CPU time of a process that loads 200 and
   1,000 scheduled jobs on weekly, monthly and yearly schedules, each its
   own, with a jitter and without: a run of one of them, ``migrate`` with
   nothing to migrate, and ``jobclaims_scheduler --list``.
2. **An idle scheduler**: its CPU per second of wall time over 5 to 5,000
   jobs, none due. One scheduler per size, all at once.
3. **The metrics app**: claim + release with ``jobclaims.contrib.prometheus``
   counting (the receivers its ``ready()`` connects), without it, and the
   raw floor, in alternating rounds; and the statements each sends.
4. **Fire to claim**: how long after its fire time each of 1,000 jobs due
   at the same second is claimed, by one scheduler that starts no process
   for a fire it won (``benchmarks.scheduler_host``).

See docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.scratch import OUTPUT, rank, scratch_database, write_figures

#: The CPU of an idle scheduler is measured after this many seconds of its run.
IDLE_WARMUP = 8.0
#: The jitter of the jobs loaded with one.
JITTER_SECONDS = 90
#: Section 4's jobs fire this often; the fires of its first this many
#: seconds are left out (a scheduler's first look at each job reads when
#: its schedule came into force).
FIRE_EVERY = 20
FIRE_WARMUP = 25
#: How long after the last fire measured its claims are waited for.
FIRE_LATEST = 120
#: What each process of section 1 runs, after ``manage.py``.
LOADING = {
    "a job's run": ["job_0000"],
    "migrate, nothing to do": ["migrate", "--verbosity", "0"],
    "jobclaims_scheduler --list": ["jobclaims_scheduler", "--list"],
}
ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    options = _parser().parse_args(argv)
    with scratch_database() as name:
        results = _measure(options, name)
    from django.db import connection

    write_figures(results, OUTPUT / f"costs-{connection.vendor}.json", table(results))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.costs", description=__doc__)
    parser.add_argument("--load", type=_numbers, default=[200, 1000], help="Jobs to load (1).")
    parser.add_argument(
        "--load-repeats", type=int, default=3, help="Processes of each kind; the median counts."
    )
    parser.add_argument(
        "--idle", type=_numbers, default=[5, 200, 1000, 5000], help="Jobs per idle scheduler (2)."
    )
    parser.add_argument("--idle-seconds", type=float, default=40, help="How long they idle.")
    parser.add_argument("--claim-seconds", type=float, default=20, help="Claims timed for (3).")
    parser.add_argument("--fire-jobs", type=int, default=1000, help="Jobs due at once (4).")
    parser.add_argument("--fires", type=int, default=3, help="Fires measured (4).")
    parser.add_argument("--sections", type=_numbers, default=[1, 2, 3, 4], help="Which to run.")
    return parser


def _numbers(text: str) -> list[int]:
    return [int(each) for each in text.split(",")]


def _measure(options: argparse.Namespace, database: str) -> dict[str, Any]:
    from django.db import connection

    from benchmarks import machine

    results: dict[str, Any] = {
        "database": machine.database(connection),
        "machine": machine.describe(),
        "code": machine.code(),
    }
    env = {**os.environ, "BENCH_DATABASE_NAME": database}
    if 1 in options.sections:
        results["load"] = [_load(size, options.load_repeats, env) for size in options.load]
    if 2 in options.sections:
        results["idle"] = _idle(options.idle, options.idle_seconds, env)
    if 3 in options.sections:
        results["metrics"] = _metrics(connection, options.claim_seconds)
    if 4 in options.sections:
        results["fire_to_claim"] = _fire_to_claim(options.fire_jobs, options.fires, env)
    results["machine"]["load_average_after"] = machine.load_average()
    return results


# Section 1: loading scheduled jobs.


def load_schedules(jobs: int) -> list[str]:
    """Weekly, monthly and yearly expressions in turn, each its own."""
    found = []
    for number in range(jobs):
        minute, hour, day = number % 60, number // 60 % 24, 1 + number % 28
        found.append(
            (
                f"{minute} {hour} * * {number % 7}",
                f"{minute} {hour} {day} * *",
                f"{minute} {hour} {day} {1 + number % 12} *",
            )[number % 3]
        )
    return found


def _load(jobs: int, repeats: int, env: dict[str, str]) -> dict[str, Any]:
    """The CPU of each process in ``LOADING`` over ``jobs`` scheduled jobs,
    with a jitter and without: the median of ``repeats`` processes each."""
    folder = Path(tempfile.mkdtemp(prefix="loadjobs-"))
    for jittered in (False, True):
        _write_project(folder, jobs, jittered)
    env = {**env, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])}
    found: dict[str, Any] = {"jobs": jobs}
    for what, argv in LOADING.items():
        seconds = {}
        for jittered in (False, True):
            settings = f"loadjobs_settings_{'jittered' if jittered else 'plain'}"
            command = [sys.executable, "-m", "django", *argv, f"--settings={settings}"]
            _cpu_of(command, env)  # Once first: migrate records the commands.
            seconds["with" if jittered else "without"] = statistics.median(
                _cpu_of(command, env) for _ in range(repeats)
            )
        found[what] = {**seconds, "ratio": seconds["with"] / seconds["without"]}
    return found


def _write_project(folder: Path, jobs: int, jittered: bool) -> None:
    """An app of ``jobs`` JobCommands, and settings that install it."""
    name = f"loadjobs_{'jittered' if jittered else 'plain'}"
    commands = folder / name / "management" / "commands"
    commands.mkdir(parents=True)
    for package in (folder / name, folder / name / "management", commands):
        (package / "__init__.py").write_text("")
    jitter = f"datetime.timedelta(seconds={JITTER_SECONDS})" if jittered else "None"
    for number, expression in enumerate(load_schedules(jobs)):
        (commands / f"job_{number:04d}.py").write_text(
            "import datetime\n\n"
            "from jobclaims.jobs.commands import JobCommand\n\n\n"
            "class Command(JobCommand):\n"
            f"    schedule = {expression!r}\n"
            f"    jitter = {jitter}\n\n"
            "    def run_job(self, run, *args, **options):\n"
            "        pass\n"
        )
    (folder / f"loadjobs_settings_{name.partition('_')[2]}.py").write_text(
        "from benchmarks.settings import *  # noqa: F403\n\n"
        f"INSTALLED_APPS = [*INSTALLED_APPS, {name!r}]  # noqa: F405\n"
    )


def _cpu_of(command: list[str], env: dict[str, str]) -> float:
    """The user and system CPU seconds of one run of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Its output is left out: migrate's warnings (W001 on SQLite) would repeat for each.
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# Section 2: idle schedulers.


def _idle(sizes: list[int], seconds: float, env: dict[str, str]) -> list[dict[str, Any]]:
    """Start one scheduler per size at once; each one's CPU per second of
    wall time after its first ``IDLE_WARMUP`` seconds."""
    folder = Path(tempfile.mkdtemp(prefix="idle-"))
    paths = {size: folder / f"idle-{size}.json" for size in sizes}
    hosts = [_host("idle", path, size, env) for size, path in paths.items()]
    time.sleep(seconds)
    for host in hosts:
        host.send_signal(signal.SIGTERM)
    for host in hosts:
        host.wait(timeout=120)
    found = []
    for size, path in paths.items():
        samples = json.loads(path.read_text())["samples"]
        measured = [(at, cpu) for at, cpu in samples if at >= samples[0][0] + IDLE_WARMUP]
        (t0, c0), (t1, c1) = measured[0], measured[-1]
        found.append({"jobs": size, "seconds": round(t1 - t0, 1), "share": (c1 - c0) / (t1 - t0)})
    return found


def _host(mode: str, path: Path, jobs: int, env: dict[str, str], *extra: str) -> Any:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.scheduler_host", mode, str(path), str(jobs), *extra],
        env=env,
        cwd=ROOT,
    )


# Section 3: the metrics app.


def _metrics(connection: Any, seconds: float) -> dict[str, Any]:
    """Claim + release with the metrics counting and without, beside the floor."""
    from django.test.utils import CaptureQueriesContext

    from benchmarks import uncontended
    from benchmarks.floor import RawCycles, floor_table
    from benchmarks.timing import interleaved, verb
    from jobclaims.contrib.prometheus import metrics

    without = uncontended.ClaimCycles("uncounted")
    counted = uncontended.ClaimCycles("counted")

    def with_metrics() -> dict[str, int]:
        metrics.connect()
        try:
            return counted.claim_and_release()
        finally:
            metrics.disconnect()

    cycles = {"without": without.claim_and_release, "with": with_metrics}
    with floor_table(connection):
        raw = RawCycles(connection, uncontended.LEASE)
        try:
            timed = interleaved(
                {"floor": raw.claim_and_release, **cycles},
                rounds=200,
                per_round=4,
                warmup=20,
                seconds=seconds,
            )
        finally:
            raw.close()
    found: dict[str, Any] = {}
    for name, cycle in cycles.items():
        with CaptureQueriesContext(connection) as captured:
            cycle()
        found[name] = {
            "statements": [verb(query["sql"]) for query in captured],
            "cycle_us": round(timed.samples(name, "cycle").median),
            "cpu_us": round(timed.samples(name, "cpu").median),
            "ratio_to_floor": round(timed.ratio(name, "floor"), 2),
        }
    found["floor"] = {
        "cycle_us": round(timed.samples("floor", "cycle").median),
        "cpu_us": round(timed.samples("floor", "cpu").median),
    }
    found["with_over_without"] = round(timed.ratio("with", "without"), 3)
    return found


# Section 4: fire to claim.


def _fire_to_claim(jobs: int, fires: int, env: dict[str, str]) -> dict[str, Any]:
    """How long after each fire its claims were taken, by one scheduler."""
    from jobclaims.models import JobRun
    from jobclaims.time.cron import CronSchedule

    cron = CronSchedule(f"*/{FIRE_EVERY} * * * * *")
    path = Path(tempfile.mkdtemp(prefix="fire-")) / "due.json"
    started = datetime.datetime.now(datetime.timezone.utc)
    host = _host("due", path, jobs, env, cron.expression)
    first = next(cron.fires_after(started + datetime.timedelta(seconds=FIRE_WARMUP)))
    measured = [first + index * datetime.timedelta(seconds=FIRE_EVERY) for index in range(fires)]
    keys = {cron.key(fire): fire for fire in measured}
    claims = JobRun.objects.filter(job__startswith=f"due_{jobs}_", window__in=keys)
    # Stopped once the last fire's claims are all taken, or FIRE_LATEST after it.
    now = datetime.datetime.now(datetime.timezone.utc)
    time.sleep(max((measured[-1] - now).total_seconds(), 0))
    deadline = time.monotonic() + FIRE_LATEST
    while claims.count() < jobs * fires and time.monotonic() < deadline:
        time.sleep(1)
    host.send_signal(signal.SIGTERM)
    host.wait(timeout=120)
    runs = claims.values_list("window", "claimed_at")
    delays = sorted((claimed_at - keys[window]).total_seconds() for window, claimed_at in runs)
    return {
        "jobs": jobs,
        "fires": fires,
        "claims": len(delays),
        "expected": jobs * fires,
        "p50_ms": _at(delays, 0.5),
        "p99_ms": _at(delays, 0.99),
        "max_ms": _at(delays, 1.0),
    }


def _at(ordered: list[float], share: float) -> float | None:
    return round(1000 * rank(ordered, share), 1) if ordered else None


def table(results: dict[str, Any]) -> str:
    database = results["database"]
    lines = [
        f"Costs that grew with jobs: {database['name']} {database['version']}, commit "
        f"{results['code']['commit']}, load {results['machine']['load_average_before'][0]} "
        f"to {results['machine']['load_average_after'][0]}"
    ]
    if "load" in results:
        lines.append(
            f"1. CPU of a process loading scheduled jobs, jitter {JITTER_SECONDS} s vs none "
            "(weekly, monthly, yearly; target: within 10%)"
        )
        for each in results["load"]:
            for what in LOADING:
                row = each[what]
                lines.append(
                    f"   {each['jobs']:>5,} jobs  {what:<28} {row['without']:6.2f} s -> "
                    f"{row['with']:6.2f} s  ({100 * (row['ratio'] - 1):+.1f}%)"
                )
    if "idle" in results:
        lines.append("2. An idle scheduler's CPU (target: <= 1% of a core at 1,000 jobs)")
        for each in results["idle"]:
            lines.append(
                f"   {each['jobs']:>5,} jobs  {100 * each['share']:6.2f}% of a core "
                f"(over {each['seconds']} s)"
            )
    if "metrics" in results:
        found = results["metrics"]
        lines.append(
            "3. Claim + release with the metrics app (target: the same statements, "
            "within 10% of without)"
        )
        for name in ("without", "with"):
            row = found[name]
            lines.append(
                f"   {name:<8} {' '.join(row['statements']):<28} {row['cycle_us']:>6} us "
                f"({row['ratio_to_floor']}x the floor), client CPU {row['cpu_us']} us"
            )
        lines.append(
            f"   floor    {found['floor']['cycle_us']:>35} us, client CPU "
            f"{found['floor']['cpu_us']} us; with / without: {found['with_over_without']}x"
        )
    if "fire_to_claim" in results:
        found = results["fire_to_claim"]
        lines.append(
            f"4. Fire to claim, 1 scheduler x {found['jobs']:,} jobs due at once, "
            f"{found['fires']} fires ({found['claims']} of {found['expected']} claims)"
        )
        lines.append(
            f"   p50 {found['p50_ms']} ms, p99 {found['p99_ms']} ms, max {found['max_ms']} ms"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
