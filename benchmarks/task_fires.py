"""The task fires benchmark: a thousand task fires due at one instant, enqueued by a fleet.

    python -m benchmarks.task_fires [--fires 1000] [--hosts 3] [--queue db] [--queue celery]

Starts ``--hosts`` schedulers over ``--fires`` task schedules (one task,
scheduled a thousand times over by ``JOBCLAIMS["TASK_SCHEDULES"]``) that all
fire every ``EVERY`` seconds, in a scratch database of its own, with no
worker, and measures one instant once every host has looked at the
schedules: how long after the fire each fire's message was enqueued (the
claim's lease minus ``QUEUE_LEASE``, by the database clock: the lease becomes
the queue lease as the message is sent, in the claim's transaction for
django-tasks-db), and how many messages each fire has (one). ``celery`` sends
to a Redis of its own. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from benchmarks.scratch import OUTPUT, percentiles, scratch_database, write_figures

#: Every fire's period: the measured instant is the first one at least
#: ``SETTLE`` seconds after every host started.
EVERY = 15
SETTLE = 5.0
#: ``JOBCLAIMS["QUEUE_LEASE"]``'s default, which the hosts keep.
QUEUE_LEASE = 3600
TASKS = {"db": "benchmarks.fleetapp.tasks.noop", "celery": "benchmarks.fleetapp.celerytasks.noop"}


def main(argv: list[str]) -> int:
    options = _parser().parse_args(argv)
    results = {queue: _run(queue, options) for queue in options.queue or ["db", "celery"]}
    write_figures(results, OUTPUT / "task-fires.json", table(results))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.task_fires", description=__doc__)
    parser.add_argument("--fires", type=int, default=1000, help="Task fires due at one instant.")
    parser.add_argument("--hosts", type=int, default=3, help="Scheduler processes.")
    parser.add_argument(
        "--queue", action="append", choices=["db", "celery"], help="Each queue to measure."
    )
    return parser


def _schedules(queue: str, fires: int) -> dict[str, Any]:
    return {
        f"n{number:04d}": {
            "task": TASKS[queue],
            "schedule": f"*/{EVERY} * * * * *",
            "kwargs": {"number": number},
        }
        for number in range(fires)
    }


def _run(queue: str, options: argparse.Namespace) -> dict[str, Any]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
        "BENCH_TASKS": "1",
        "BENCH_TASK_SCHEDULES": json.dumps(_schedules(queue, options.fires)),
    }
    redis = _redis() if queue == "celery" else None
    if redis is not None:
        env["BENCH_CELERY_BROKER"] = redis[1]
    os.environ.update(env)
    try:
        with scratch_database() as name:
            return _measure(queue, options, {**env, "BENCH_DATABASE_NAME": name}, redis)
    finally:
        if redis is not None:
            redis[0].terminate()


def _measure(
    queue: str,
    options: argparse.Namespace,
    env: dict[str, str],
    redis: tuple[subprocess.Popen[bytes], str] | None,
) -> dict[str, Any]:
    from jobclaims.models import JobRun
    from jobclaims.time.clock import database_now

    hosts = [
        subprocess.Popen(
            [sys.executable, "-m", "django", "jobclaims_scheduler", "--verbosity", "0"],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        for _ in range(options.hosts)
    ]
    try:
        started = database_now()
        instant = _next_instant(started + datetime.timedelta(seconds=SETTLE + 10))
        time.sleep(max((instant - database_now()).total_seconds(), 0) + 8)
    finally:
        for host in hosts:
            host.send_signal(signal.SIGTERM)
        for host in hosts:
            host.wait(timeout=60)
    rows = list(
        JobRun.objects.filter(window=_key(instant)).values_list("claimed_at", "expires_at", "owner")
    )
    lease = datetime.timedelta(seconds=QUEUE_LEASE)
    latencies = sorted(((expires - lease) - instant).total_seconds() for _, expires, _ in rows)
    winners: dict[str, int] = {}
    for _, _, owner in rows:
        host = owner.rsplit(":", 1)[0]
        winners[host] = winners.get(host, 0) + 1
    return {
        "queue": queue,
        "fires": options.fires,
        "hosts": options.hosts,
        "instant": instant.isoformat(),
        "claimed": len(rows),
        "messages": _messages(queue, _key(instant), redis),
        "enqueued_after_fire_s": percentiles(latencies),
        "fires_won_per_host": sorted(winners.values()),
    }


def _key(instant: datetime.datetime) -> str:
    """The fire's key in UTC: to the minute, with seconds only where they are not zero."""
    return instant.strftime("%Y-%m-%dT%H:%M:%S+00:00" if instant.second else "%Y-%m-%dT%H:%M+00:00")


def _messages(
    queue: str, key: str, redis: tuple[subprocess.Popen[bytes], str] | None
) -> dict[str, int]:
    """How many messages were sent for the instant's fires, and for how many fires."""
    if queue == "db":
        from django.apps import apps

        config = next(each for each in apps.get_app_configs() if each.name == "django_tasks_db")
        windows = [
            row["kwargs"]["jobclaims_fire"]
            for row in config.get_model("DBTaskResult").objects.values_list(
                "args_kwargs", flat=True
            )
        ]
        fires = [(each["job"], each["window"]) for each in windows if each["window"] == key]
    else:
        import redis as client

        assert redis is not None
        connection = client.Redis.from_url(redis[1])
        fires = []
        for raw in connection.lrange(os.environ.get("BENCH_CELERY_QUEUE", "bench"), 0, -1):
            headers = json.loads(raw)["headers"]
            if headers.get("jobclaims_window") == key:
                fires.append((json.loads(headers["jobclaims_fire"])["job"], key))
    return {"sent": len(fires), "fires": len(set(fires))}


def _next_instant(after: datetime.datetime) -> datetime.datetime:
    seconds = (after.second // EVERY + 1) * EVERY
    return after.replace(second=0, microsecond=0) + datetime.timedelta(seconds=seconds)


def _redis() -> tuple[subprocess.Popen[bytes], str]:
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed: apt-get install redis-server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    return process, f"redis://127.0.0.1:{port}/0"


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "queue   fires hosts claimed sent fires-with-a-message  enqueued after the fire: "
        "p50 / p99 / max (s)  fires won per host"
    ]
    for each in results.values():
        latency = each["enqueued_after_fire_s"]
        lines.append(
            f"{each['queue']:<7} {each['fires']:>5} {each['hosts']:>5} {each['claimed']:>7} "
            f"{each['messages']['sent']:>4} {each['messages']['fires']:>20}  "
            f"{latency.get('p50')} / {latency.get('p99')} / {latency.get('max')}"
            f"{'':>22}{each['fires_won_per_host']}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
