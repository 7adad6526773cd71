"""Claimed Celery tasks under real beats and workers, on a Redis of the test's own.

Two ``celery beat`` processes send ``tests.tick`` every second each, as two
pods of a deploy overlap would, to two workers with two pool children each;
every 2-second window must run once, and none be missed. Meanwhile a pool
child is SIGKILLed in the middle of an ``acks_late`` task: Celery redelivers
it at once, it waits for the dead run's lease, which ends after the window
does, and the window still ends succeeded, once. A task that calls
``self.retry()`` keeps its claim, and a refused task is IGNORED in the
result backend, not a SUCCESS.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Sum

from jobclaims.claiming import claimed
from jobclaims.models import JobRun, JobSkip
from jobclaims.testing import child_environment
from jobclaims.windows import resolve
from tests.test_concurrency import wait_until
from tests.testapp.models import Charge

if os.environ.get("CI") != "true":  # Under CI a missing Celery fails the run.
    pytest.importorskip("celery")

RUN_FOR = 30  # Seconds of two beats: 15 windows of tests.tick.


def _redis_server() -> str:
    """Debian's redis-server; under CI its absence fails the test, elsewhere skips it."""
    server = shutil.which("redis-server")
    if server is None:
        message = "redis-server is not installed: apt-get install redis-server"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return server


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A Redis of this test's own, on a port of its own, kept in memory only."""
    port = _free_port()
    options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"]
    server = subprocess.Popen(
        [_redis_server(), "--port", str(port), *options],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}"
    try:
        import redis

        client = redis.Redis.from_url(url)
        wait_until(lambda: _answers(client), "Redis to answer", timeout=10)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _answers(client: object) -> bool:
    import redis

    try:
        return bool(client.ping())  # type: ignore[attr-defined]
    except redis.ConnectionError:
        return False


class Fleet:
    """Celery processes of ``tests.celeryapp``, each logging to a file."""

    def __init__(self, redis: str, logs: Path):
        self.env = {**os.environ, **child_environment(), "TESTS_CELERY_REDIS": redis}
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *argv: str) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.celeryapp", *argv],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def stop(self, *names: str) -> None:
        for name in names:
            self.processes[name].send_signal(signal.SIGTERM)
        for name in names:
            try:
                self.processes[name].wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.processes[name].kill()
                self.processes[name].wait()

    def stop_all(self) -> None:
        self.stop(*[name for name, process in self.processes.items() if process.poll() is None])


@pytest.fixture
def fleet(redis_url: str, tmp_path: Path) -> Iterator[Fleet]:
    group = Fleet(redis_url, tmp_path)
    try:
        yield group
    finally:
        group.stop_all()
        for name in group.processes:
            print(f"--- {name}\n{group.log(name)[-3000:]}")


@pytest.mark.xdist_group("fleets")
@pytest.mark.django_db(transaction=True)
def test_two_beats_and_two_workers_run_every_window_once_through_a_worker_loss(
    fleet: Fleet, redis_url: str, capsys
):
    os.environ["TESTS_CELERY_REDIS"] = redis_url
    from jobclaims.contrib.celery import WINDOW_HEADER
    from tests.celeryapp import OUTLIVED_WINDOW, TICK_WINDOW, app, outlived, retried

    app.conf.update(broker_url=f"{redis_url}/0", result_backend=f"{redis_url}/1")
    for number in (1, 2):
        fleet.start(
            f"worker{number}",
            "worker",
            "--concurrency=2",
            "--pool=prefork",
            f"--hostname=worker{number}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
        )
    for number in (1, 2):
        log = f"worker{number}"
        wait_until(lambda: "ready." in fleet.log(log), f"{log} to start", 30)  # noqa: B023
    started = time.monotonic()
    for number in (1, 2):
        schedule = fleet.logs / f"beat{number}-schedule"
        fleet.start(f"beat{number}", "beat", f"--schedule={schedule}", "--loglevel=INFO")

    # A pool child killed mid-task: the redelivery waits for the dead run's
    # lease, which outlives the window, and then finishes that window.
    killed = outlived.apply_async(args=[5.0])
    first_delivery = Charge.objects.filter(job="tests.outlived", step=0)
    wait_until(first_delivery.exists, "the task to start", 20)
    started_run = first_delivery.get()
    os.kill(started_run.pid, signal.SIGKILL)
    assert killed.get(timeout=25) == started_run.window

    # Celery's own retry keeps the claim: attempt 1, no failure recorded.
    assert retried.apply_async().get(timeout=15) == 1

    # A refusal is IGNORED in the result backend, and says why.
    refused = outlived.apply_async(args=[0.0], headers={WINDOW_HEADER: started_run.window})
    wait_until(lambda: refused.state == "IGNORED", "the refused task's state", 15)
    assert refused.info["reason"] == "succeeded"
    assert refused.info["job"] == "tests.outlived"

    time.sleep(max(0.0, RUN_FOR - (time.monotonic() - started)))
    fleet.stop("beat1", "beat2")
    time.sleep(TICK_WINDOW.total_seconds() + 1)  # Let the last window's tasks end.
    fleet.stop("worker1", "worker2")

    outlived_run = JobRun.objects.get(job="tests.outlived")
    assert (outlived_run.status, outlived_run.attempt) == ("succeeded", 2)
    window_end = resolve(OUTLIVED_WINDOW).start_of(outlived_run.window) + OUTLIVED_WINDOW
    assert outlived_run.claimed_at >= window_end, "the takeover did not outlive the window"
    finished = Charge.objects.filter(job="tests.outlived", step=1)
    assert [charge.attempt for charge in finished] == [2]

    retried_run = JobRun.objects.get(job="tests.retried")
    assert (retried_run.status, retried_run.attempt, retried_run.error) == ("succeeded", 1, "")

    ticks = JobRun.objects.filter(job="tests.tick")
    assert not ticks.exclude(status="succeeded").exists(), list(ticks.values())
    window = resolve(TICK_WINDOW)
    starts = sorted(window.start_of(run.window) for run in ticks)
    # The first and last windows may have been cut by the beats' start and stop.
    inner = starts[1:-1]
    assert len(inner) >= RUN_FOR / TICK_WINDOW.total_seconds() - 4, starts
    gaps = [later - earlier for earlier, later in itertools.pairwise(inner)]
    assert set(gaps) == {TICK_WINDOW}, f"a window was missed: {starts}"
    runs_per_window = Counter(Charge.objects.filter(job="tests.tick").values_list("window"))
    assert set(runs_per_window.values()) == {1}, runs_per_window

    skips = JobSkip.objects.filter(job="tests.tick")
    rows, counted = skips.count(), sum(skips.values_list("count", flat=True))
    per_day = 86400 / TICK_WINDOW.total_seconds() / len(starts)
    reasons = dict(skips.values_list("reason").annotate(n=Sum("count")).values_list("reason", "n"))
    with capsys.disabled():
        print(
            f"\n[{connection.vendor}] tests.tick: {len(starts)} windows run once each; "
            f"{counted} skips in {rows} rows ({rows / len(starts):.2f} rows per window, "
            f"{rows * per_day:,.0f} a day); reasons {reasons}"
        )


def test_claimed_above_a_celery_task_is_refused_naming_the_fix():
    from celery import shared_task

    @shared_task(name="tests.misordered")
    def misordered() -> None: ...

    with pytest.raises(TypeError, match=r"base=jobclaims\.contrib\.celery\.ClaimedTask"):
        claimed(window="hourly")(misordered)


def test_a_claimed_task_with_a_bad_window_is_refused_as_it_is_defined():
    from celery import shared_task

    from jobclaims.contrib.celery import ClaimedTask

    def bad_window() -> None: ...

    # A shared task is created when first used, or at once by a ready app.
    with pytest.raises(ValueError, match="unknown window 'hourl'"):
        shared_task(name="tests.bad_window", base=ClaimedTask, claim_window="hourl")(bad_window).run  # noqa: B018


@pytest.mark.django_db(transaction=True)
def test_a_claimed_task_run_eagerly_or_called_returns_none_when_refused():
    from tests.celeryapp import slow

    assert slow.apply(args=[0.0]).get() == JobRun.objects.get().window
    assert slow.apply(args=[0.0]).get() is None
    assert slow(0.0) is None
    assert Charge.objects.filter(step=1).count() == 1
