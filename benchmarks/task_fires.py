"""The task fires benchmark: a thousand task fires due at one instant, enqueued by a fleet.

    python -m benchmarks.task_fires [--fires 1000] [--hosts 3] [--queue db] [--queue celery]

Starts ``--hosts`` schedulers over ``--fires`` task schedules (one task,
scheduled a thousand times over by ``JOBCLAIMS["TASK_SCHEDULES"]``) that all
fire every ``EVERY`` seconds, in a scratch database of its own, with no
worker, and measures one instant once every host has looked at the
schedules: how long after the fire each fire was claimed, and each message
could be seen by a worker (the queue's length, read every ``POLL`` seconds:
a django-tasks-db message commits with its claim, a Celery message is sent
once the claims committed), and how many messages each fire has (one).
``celery`` sends to a Redis of its own. See docs/performance.md.
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
from collections.abc import Callable
from typing import Any

from benchmarks.scratch import OUTPUT, percentiles, scratch_database, write_figures

#: Every fire's period: the measured instant is the first one at least
#: ``SETTLE`` seconds after every host started.
EVERY = 15
SETTLE = 5.0
#: How often the queue's length is read, and for how long, in seconds.
POLL = 0.01
WATCH = 9.0
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
        time.sleep(max((instant - database_now()).total_seconds() - 1, 0))
        visible = _watch_messages(queue, redis, instant, options.fires)
    finally:
        for host in hosts:
            host.send_signal(signal.SIGTERM)
        for host in hosts:
            host.wait(timeout=60)
    rows = list(
        JobRun.objects.filter(window=_key(instant)).values_list("claimed_at", "expires_at", "owner")
    )
    claimed = sorted((claimed_at - instant).total_seconds() for claimed_at, _, _ in rows)
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
        "claimed_after_fire_s": percentiles(claimed),
        "visible_after_fire_s": percentiles(visible),
        "fires_won_per_host": sorted(winners.values()),
    }


def _watch_messages(
    queue: str,
    redis: tuple[subprocess.Popen[bytes], str] | None,
    instant: datetime.datetime,
    fires: int,
) -> list[float]:
    """When each of the instant's messages could be seen by a worker, in
    seconds after the fire: its queue's length read every ``POLL``
    seconds from a second before the instant until all ``fires`` are there
    (or ``WATCH`` seconds passed). A django-tasks-db message is seen once
    its transaction commits, a Celery message once Redis has it."""
    from jobclaims.time.clock import database_now

    count = _message_counter(queue, redis)
    # This host's clock, set to the database's once: the hosts share this machine.
    offset = database_now().timestamp() - time.time()
    baseline = count()
    seen: list[float] = []
    deadline = time.time() + WATCH
    while len(seen) < fires and time.time() < deadline:
        now = time.time() + offset - instant.timestamp()
        seen += [now] * (count() - baseline - len(seen))
        time.sleep(POLL)
    return sorted(seen)


def _message_counter(
    queue: str, redis: tuple[subprocess.Popen[bytes], str] | None
) -> Callable[[], int]:
    """How many messages the queue holds, read on each call."""
    if queue == "db":
        from django.apps import apps

        config = next(each for each in apps.get_app_configs() if each.name == "django_tasks_db")
        results = config.get_model("DBTaskResult").objects
        return results.count
    import redis as client

    assert redis is not None
    connection = client.Redis.from_url(redis[1])
    name = os.environ.get("BENCH_CELERY_QUEUE", "bench")
    return lambda: int(connection.llen(name))


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
        "queue   fires hosts claimed sent fires-with-a-message  after the fire, p50 / p99 / max "
        "(s): claimed; message seen  fires won per host"
    ]
    for each in results.values():
        claimed, seen = each["claimed_after_fire_s"], each["visible_after_fire_s"]
        lines.append(
            f"{each['queue']:<7} {each['fires']:>5} {each['hosts']:>5} {each['claimed']:>7} "
            f"{each['messages']['sent']:>4} {each['messages']['fires']:>20}  "
            f"{claimed.get('p50')} / {claimed.get('p99')} / {claimed.get('max')}; "
            f"{seen.get('p50')} / {seen.get('p99')} / {seen.get('max')}"
            f"  {each['fires_won_per_host']}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
