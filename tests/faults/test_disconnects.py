"""What a claim does when the database server ends its connection, or cannot
be reached: it tries again from a fresh connection, and a command that
cannot claim says so in one line.

Real faults of a real server: the session is ended by another one
(``pg_terminate_backend``, ``KILL``), the port has no server behind it.
SQLite has no connection to lose.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import DatabaseError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from jobclaims.claims import retries
from jobclaims.models import JobRun
from tests.testapp.models import Charge

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        os.environ.get("DATABASE_URL", "").startswith("sqlite")
        or not os.environ.get("DATABASE_URL"),
        reason="SQLite has no connection to lose",
    ),
]

WINDOW = "2026-12-02T03:00+00:00"
LEASE = datetime.timedelta(seconds=30)


@pytest.fixture
def other() -> Iterator[BaseDatabaseWrapper]:
    """Another session on the test database, to end ours from."""
    session = connections.create_connection("default")
    yield session
    session.close()


def end_our_session(other: BaseDatabaseWrapper) -> None:
    """End the test's own connection from ``other``, as a crash or an operator would."""
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_backend_pid()"
            if connection.vendor == "postgresql"
            else "SELECT CONNECTION_ID()"
        )
        (session_id,) = cursor.fetchone()
    with other.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_terminate_backend(%s)", [session_id])
        else:
            cursor.execute(f"KILL {int(session_id)}")


def test_a_claim_whose_session_the_server_ended_claims_from_a_fresh_connection(other):
    end_our_session(other)
    run = JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE)
    assert run is not None
    assert JobRun.objects.get().token == run.token


def test_a_release_whose_session_the_server_ended_records_the_outcome(other):
    run = JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE)
    assert run is not None
    end_our_session(other)
    assert run.release(JobRun.Status.SUCCEEDED)
    assert JobRun.objects.get().status == JobRun.Status.SUCCEEDED


def test_an_ended_session_and_a_refused_connection_are_disconnects(other):
    end_our_session(other)
    with pytest.raises(DatabaseError) as ended, connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    connection.close()
    assert retries.is_disconnect(ended.value)
    refused = type(connections["default"])(
        {**connection.settings_dict, "PORT": "1"}, alias="default"
    )
    with pytest.raises(DatabaseError) as error:
        refused.ensure_connection()
    assert retries.is_disconnect(error.value)
    assert retries.is_transient(error.value)


def without_a_server(url: str) -> str:
    """``url`` pointed at a port with no server behind it."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:1"))


def test_a_job_that_cannot_reach_its_database_says_so_in_one_line_and_does_not_run():
    # With no server, no database to count charges in: the job prints one.
    job = subprocess.run(
        [sys.executable, "-m", "django", "charge_ledger", "--window", WINDOW],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": without_a_server(os.environ["DATABASE_URL"]),
        },
        timeout=60,
    )
    assert job.returncode == 1
    assert "charging" not in job.stdout
    [line] = job.stderr.splitlines()
    assert line.startswith(f"CommandError: Could not claim charge_ledger {WINDOW}: ")
    assert line.endswith("so nothing ran; the next run tries again")
    assert not Charge.objects.exists()


def test_a_database_that_never_answers_or_refuses_ends_a_job_in_one_line_and_nothing_is_written():
    """A server that accepts the connection and never answers (a primary
    failing over: "connection timeout expired"), and a port with no server,
    before the claim's first step: a job's own command and the operator's
    ``jobclaims_run`` exit 1 with one line, as any claim the database
    cannot make, never a traceback."""
    silent = socket.create_server(("127.0.0.1", 0))  # Accepts, and never answers.
    url = urlsplit(os.environ["DATABASE_URL"])
    unreachable = {
        "silent": url._replace(
            netloc=f"{url.username}@127.0.0.1:{silent.getsockname()[1]}",
            query="connect_timeout=1",
        ),
        "refused": url._replace(netloc=f"{url.username}@127.0.0.1:1"),
    }
    commands = {"job": ["charge_ledger"], "run now": ["jobclaims_run", "charge_ledger"]}
    jobs = {
        (server, way): subprocess.Popen(
            [sys.executable, "-m", "django", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "tests.settings",
                "DATABASE_URL": urlunsplit(address),
            },
        )
        for server, address in unreachable.items()
        for way, argv in commands.items()
    }
    try:
        ended = {each: job.communicate(timeout=120) for each, job in jobs.items()}
    finally:
        silent.close()
    for each, (stdout, stderr) in ended.items():
        assert (jobs[each].returncode, stdout) == (1, ""), (each, stdout, stderr)
        [line] = stderr.splitlines()
        assert line.startswith("CommandError: Could not claim charge_ledger"), (each, line)
        assert line.endswith("so nothing ran; the next run tries again"), (each, line)
    assert not Charge.objects.exists()
    assert not JobRun.objects.exists()


class Proxy:
    """A TCP relay to the database server that can be cut: the server gone,
    as a killed node or a failed-over primary is to its clients."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        port: int = self.listener.getsockname()[1]
        return port

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._relay(client)

    def _relay(self, client: socket.socket) -> None:
        server = socket.create_connection(self.target)
        self.sockets += [client, server]
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)

    def cut(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def test_a_job_whose_database_goes_away_as_it_runs_says_so_in_one_line(tmp_path):
    # Its claim is lost to the outage, and so is the read that would say
    # whether an operator cancelled it: neither may end in a traceback.
    url = urlsplit(os.environ["DATABASE_URL"])
    proxy = Proxy(url.hostname or "127.0.0.1", url.port or 0)
    through_proxy = url._replace(
        netloc=f"{url.username}@127.0.0.1:{proxy.port}",
        path=f"/{connection.settings_dict['NAME']}",  # The test database.
    )
    job = subprocess.Popen(
        [sys.executable, "-m", "django", "nemesis_job", "--window", WINDOW, "--lease", "2",
         "--hold", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": urlunsplit(through_proxy),
            "NEMESIS_RUNS": str(tmp_path / "runs"),
        },
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (tmp_path / "runs").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proxy.cut()
    _, stderr = job.communicate(timeout=60)
    started = [line for line in (tmp_path / "runs").read_text().splitlines() if line[:3] != "end"]
    assert len(started) == 1
    assert job.returncode == 1
    # The heartbeat logs its failed renewals; the command's end is one line.
    *logged, line = stderr.splitlines()
    assert all(entry.startswith(("Could not renew", "\t")) for entry in logged), stderr
    assert line.startswith(f"CommandError: nemesis_job {WINDOW} ran, but the database did not")
    assert line.endswith("stopped without recording an outcome")


class StallingProxy(Proxy):
    """A relay whose first connection is accepted and never answered: a
    primary failing over, whose clients' connection attempts time out."""

    def __init__(self, host: str, port: int) -> None:
        self.stalled = 0
        super().__init__(host, port)

    def _relay(self, client: socket.socket) -> None:
        if not self.stalled:
            self.stalled += 1
            self.sockets.append(client)  # Held open, never answered.
            return
        super()._relay(client)


def test_a_connection_timeout_before_the_claim_is_tried_again_and_the_job_runs():
    # PostgreSQL's "connection timeout expired" (psycopg's ConnectionTimeout)
    # once ended the command in a traceback: the failover was over by then.
    url = urlsplit(os.environ["DATABASE_URL"])
    proxy = StallingProxy(url.hostname or "127.0.0.1", url.port or 0)
    through_proxy = url._replace(
        netloc=f"{url.username}@127.0.0.1:{proxy.port}",
        path=f"/{connection.settings_dict['NAME']}",  # The test database.
        query="connect_timeout=1",
    )
    job = subprocess.run(
        [sys.executable, "-m", "django", "charge_ledger", "--window", WINDOW],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": urlunsplit(through_proxy),
        },
        timeout=60,
    )
    proxy.cut()
    assert (job.returncode, job.stderr) == (0, "")
    assert proxy.stalled == 1
    assert Charge.objects.count() == 1


CLAIM_OR_CLAIMED = """
import sys
import django
django.setup()
from jobclaims import ClaimFailed, claim, claimed

@claimed("sync_ledger", window="hourly")
def sync_ledger():
    print("ran")

try:
    if sys.argv[1] == "claim()":
        with claim("sync_ledger", window="hourly"):
            print("ran")
    else:
        sync_ledger()
except ClaimFailed as failed:
    print(f"{sys.argv[1]}: {failed}")
"""


def test_a_claim_or_claimed_function_that_cannot_connect_raises_claim_failed_in_one_line():
    # A database the server does not have: psycopg tries it again as a lost
    # connection, MariaDB's client refuses it at once.
    url = urlsplit(os.environ["DATABASE_URL"])
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": urlunsplit(url._replace(path="/h_no_such_database")),
    }
    calls = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIM_OR_CLAIMED, way],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for way in ("claim()", "@claimed")
    ]
    for way, call in zip(("claim()", "@claimed"), calls, strict=True):
        out, err = call.communicate(timeout=60)
        assert (call.returncode, err) == (0, "")
        [line] = out.splitlines()
        assert line.startswith(f"{way}: Could not claim sync_ledger: the database ")
        assert "h_no_such_database" in line
        assert line.endswith("so nothing ran; the next run tries again")


#: Each operator command, as a runbook types it.
OPERATOR_COMMANDS = [
    ["jobclaims_pause", "charge_ledger"],
    ["jobclaims_resume", "charge_ledger"],
    ["jobclaims_cancel", "charge_ledger"],
    ["jobclaims_expire", "charge_ledger", "--window", WINDOW],
    ["jobclaims_retire", "charge_ledger"],
    ["jobclaims_prune", "--older-than", "30d"],
    ["jobclaims_status"],
    ["jobclaims_scheduler", "--list"],
]


def test_an_operator_command_that_cannot_reach_the_database_says_so_in_one_line():
    """A stopped server or a failover is when an operator runs these: one
    line naming the command and what the database answered, exit 1."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": without_a_server(os.environ["DATABASE_URL"]),
    }
    commands = {
        argv[0]: subprocess.Popen(
            [sys.executable, "-m", "django", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for argv in OPERATOR_COMMANDS
    }
    for name, command in commands.items():
        stdout, stderr = command.communicate(timeout=120)
        assert (command.returncode, stdout) == (1, ""), (name, stdout, stderr)
        [line] = stderr.splitlines()
        assert line.startswith(f"CommandError: {name} stopped: the claims database answered "), line
        assert line.endswith("; run it again once the database answers"), line
