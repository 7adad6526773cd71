"""What the test modules share: running a command, counting a race's outcomes,
waiting on the database, and leaving out what this machine cannot run.

Fixtures live in conftest.py; claims in a chosen state in factories.py.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from io import StringIO
from typing import IO, NoReturn

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

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


#: A command a message names: ``manage.py`` and its words, plain or quoted,
#: up to the punctuation or the end that ends it.
_NAMED = re.compile(
    r"manage\.py ((?:'[^']*'|[^\s';,()]+)(?: (?!(?:or|and|then) )(?:'[^']*'|[^\s';,()]+))*)"
)


def verbs(queries: Iterable[dict[str, str]]) -> list[str]:
    """The verb of each captured statement: MariaDB's "SET STATEMENT x FOR
    INSERT" is an INSERT, a union of selects in parentheses, "(SELECT
    ...", a SELECT, and PostgreSQL's claim, a SELECT from the function
    jobclaims_claim() (or a call of jobclaims_claim_then_read()), the
    INSERT that function runs."""
    return [
        "INSERT"
        if _CLAIM_CALL.match(query["sql"])
        else re.sub(r"^SET STATEMENT .+? FOR\s+", "", query["sql"]).lstrip("(").split()[0]
        for query in queries
    ]


_CLAIM_CALL = re.compile(r"SELECT [^;]*?\bFROM jobclaims_claim\(|CALL jobclaims_claim_then_read\(")

#: What jobclaims' functions and procedures run, by vendor and name, as
#: their migrations write them.
FUNCTIONS = {
    vendor: {
        body.split("(", 1)[0]: body
        for migration in migrations
        for body in re.split(
            "CREATE (?:FUNCTION|PROCEDURE) ",
            importlib.import_module(f"jobclaims.migrations.{migration}").CREATE,
        )[1:]
    }
    for vendor, migrations in {
        "postgresql": ("0002_postgresql_claim_functions", "0003_postgresql_claim_procedure"),
        "mysql": ("0004_mariadb_claim_procedure",),
    }.items()
}


def written_out(sql: str) -> str:
    """``sql``, with what each jobclaims function or procedure it calls
    runs on the default database written in after its name: a test of what
    a statement reads reads that too."""
    for name, body in FUNCTIONS.get(connection.vendor, {}).items():
        sql = sql.replace(f"{name}(", f"{name} /* {body} */ (")
    return sql


def commands_named(message: str) -> list[list[str]]:
    """Each ``manage.py`` command ``message`` tells the user to run, as its
    arguments: what a test of a message runs, to prove the fix works."""
    return [shlex.split(found[1].rstrip(".")) for found in _NAMED.finditer(message)]


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


def lines_until(
    process: subprocess.Popen[str], stream: IO[str], text: str, timeout: float = 60
) -> list[str]:
    """The lines ``process`` writes to ``stream`` (its stdout or stderr pipe)
    up to the first holding ``text``: a barrier on what the process says.

    A process that has not said it within ``timeout`` seconds is killed,
    which ends the read: a process hung fails the test, not the run."""
    lines: list[str] = []
    watchdog = threading.Timer(timeout, process.kill)
    watchdog.start()
    try:
        while text not in (line := stream.readline()):
            assert line, f"the process ended without saying {text!r}: {lines}"
            lines.append(line)
    finally:
        watchdog.cancel()
    return [*lines, line]


def is_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie not yet reaped included)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # Gone before, or while, it was read.
        return True


def unavailable(message: str) -> NoReturn:
    """Skip a test this machine cannot run; under ``CI=true``, fail it.

    A laptop's ``make test`` runs without the clusters and the pooler, and
    their tests skip, saying what to start. CI must never skip them silently.
    """
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; CI=true needs every test to run")
    pytest.skip(message)


def once_across_the_databases() -> None:
    """Skip a test that the suite's database plays no part in, but on PostgreSQL.

    ``make test`` runs the suite on SQLite, PostgreSQL and MariaDB; a test of
    processes and files of their own, or of a database server of its own,
    would prove the same thing three times, at a minute or two each, of CI's
    forty. It runs with the PostgreSQL suite, which CI always runs.
    """
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("it does not use the suite's database: it runs with the PostgreSQL suite")


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


def output_of(job: str) -> str:
    """What the one run of ``job`` printed, as its release kept it."""
    from jobclaims.models import JobRun

    output = JobRun.objects.get(job=job).output
    assert output is not None, f"{job}'s run kept no output"
    return output


def stdin_closed() -> threading.Event:
    """An event set once this process's standard input closes: how a test
    tells a support process it started to finish what it is doing."""
    closed = threading.Event()

    def wait() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=wait, daemon=True).start()
    return closed
