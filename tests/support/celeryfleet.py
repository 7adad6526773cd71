"""Celery processes for the tests: a Redis of the run's own, and a fleet of workers and beats.

The Redis is one per test session (per xdist worker), shared by every Celery
test: the test process's Celery app keeps its result backend's connection,
which must outlive any one test module.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobclaims.testing import child_environment
from tests.support.helpers import wait_until


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


@pytest.fixture(scope="session")
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
    """Celery processes of ``tests.support.celeryapp``, each logging to a file."""

    def __init__(self, redis: str, logs: Path):
        self.env = {**os.environ, **child_environment(), "TESTS_CELERY_REDIS": redis}
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *argv: str) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.support.celeryapp", *argv],
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
