"""What the test modules share: running a command, counting a race's outcomes,
waiting on the database, and leaving out what this machine cannot run.

Fixtures live in conftest.py; claims in a chosen state in factories.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from io import StringIO
from typing import NoReturn

import pytest
from django.core.management import CommandError, call_command

from jobclaims.testing import InstanceResult


def run_command(name: str, *args: str) -> tuple[str, str, int]:
    """Run a management command in this process: (stdout, stderr, exit status)."""
    out, err = StringIO(), StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=err)
    except CommandError as error:
        err.write(str(error))
        return out.getvalue(), err.getvalue(), 1
    return out.getvalue(), err.getvalue(), 0


def states_of(job: str) -> dict[str, str]:
    """Each claim of ``job``'s window and state, as ``jobclaims_status --json`` reports them."""
    out, err, status = run_command("jobclaims_status", "--job", job, "--json")
    assert status == 0, err
    return {claim["window"]: claim["state"] for claim in json.loads(out)["claims"]}


def outcomes(results: Iterable[InstanceResult]) -> Counter[str]:
    """How many instances ran, skipped and failed."""
    return Counter(result.outcome for result in results)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Poll the database until ``condition`` holds (a wait, not a barrier)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def is_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie not yet reaped included)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def unavailable(message: str) -> NoReturn:
    """Skip a test this machine cannot run; under ``CI=true``, fail it.

    A laptop's ``make test`` runs without the clusters and the pooler, and
    their tests skip, saying what to start. CI must never skip them silently.
    """
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; CI=true needs every test to run")
    pytest.skip(message)


def cluster_setting(variable: str, how: str) -> str:
    """The value of ``variable``, which names a cluster that scripts start
    (scripts/start-galera, scripts/start-pg-replica), not the suite."""
    value = os.environ.get(variable, "")
    if value:
        return value
    unavailable(f"{variable} is not set: {how}")


def unanswered_database_url() -> str:
    """A ``DATABASE_URL`` of the suite's database kind that nothing answers:
    a port no server listens on, or a SQLite file in a folder that does not exist."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        return "postgres://postgres@127.0.0.1:9/jobclaims_down"
    if url.startswith("mysql"):
        return "mysql://root@127.0.0.1:9/jobclaims_down"
    return "sqlite:////nonexistent-folder/jobclaims_down.sqlite3"


def run_python(code: str, *, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a real Python process with the test settings and ``env``."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
