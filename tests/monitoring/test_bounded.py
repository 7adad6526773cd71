"""The alarm path's reads end within HEALTH_TIMEOUT, whatever the claims
database does: --check says UNKNOWN, the metrics jobclaims_up 0, the health
page unavailable, in time for a monitor or a scrape to hear it."""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from io import StringIO
from typing import Any, TypeVar

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.test import override_settings

from jobclaims.models import JobRun
from tests.contrib.test_prometheus import value
from tests.support.helpers import run_python

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("deployed_now")]

TIMEOUT = datetime.timedelta(seconds=1)
#: How long the lock holds at most.
LET_GO = 10

#: Each backend's way for another session to keep every read of the claims
#: table waiting: an exclusive lock, held until the session lets go.
LOCKS = {
    "postgresql": ["BEGIN", f"LOCK TABLE {JobRun._meta.db_table} IN ACCESS EXCLUSIVE MODE"],
    "mysql": [f"LOCK TABLES {JobRun._meta.db_table} WRITE"],
    "sqlite": ["BEGIN EXCLUSIVE"],
}


@contextmanager
def claims_table_locked() -> Iterator[None]:
    """Another session holds the claims table, so that health's reads wait:
    for ``LET_GO`` seconds at most, so that a read without a bound fails the
    test instead of hanging it."""
    other = connections.create_connection("default")
    with other.cursor() as cursor:
        for statement in LOCKS[other.vendor]:
            cursor.execute(statement)
    other.inc_thread_sharing()  # The timer's thread may close it.
    let_go = threading.Timer(LET_GO, other.close)
    let_go.start()
    try:
        yield
    finally:
        let_go.cancel()
        other.close()


_T = TypeVar("_T")


def timed(work: Callable[[], _T]) -> tuple[_T, float]:
    started = time.monotonic()
    result = work()
    return result, time.monotonic() - started


def check() -> CommandError:
    with pytest.raises(CommandError) as raised:
        call_command("jobclaims_status", "--check", stdout=StringIO())
    return raised.value


@override_settings(JOBCLAIMS={"HEALTH_TIMEOUT": TIMEOUT})
def test_reads_the_database_keeps_waiting_end_unknown_within_the_timeout(client):
    JobRun.objects.claim("charge_invoices", "2026-11-29", lease=TIMEOUT * 600)
    with claims_table_locked():
        error, took = timed(check)
        assert (error.returncode, took < 3) == (3, True), (error, took)
        assert str(error).startswith("UNKNOWN: the claims database did not answer: ")
        assert "within 1 seconds (JOBCLAIMS['HEALTH_TIMEOUT'])" in str(error)
        scraped: Any
        scraped, took = timed(lambda: client.get("/metrics/"))
        assert (scraped.status_code, took < 3) == (200, True), took
        assert value(scraped.content.decode(), "jobclaims_up") == 0
        page: Any
        page, took = timed(lambda: client.get("/health/?format=json"))
        assert (page.status_code, took < 3) == (500, True), took
        assert page.json()["ScheduledJobs()"] == ("Unavailable: the claims database did not answer")
    # The late reads were cut off; this thread's connection serves again.
    out = StringIO()
    call_command("jobclaims_status", "--check", "--job", "charge_invoices", stdout=out)
    assert out.getvalue() == "charge_invoices is healthy.\n"
    assert JobRun.objects.using(connection.alias).count() == 1


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never says a word: a database
    whose processes are paused still completes the TCP handshake."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


#: Six scrapes of a database that never answers, each timed, in one process.
SCRAPES = """\
import time
import django; django.setup()
from django.test import Client
for _ in range(6):
    started = time.monotonic()
    up = [line for line in Client().get("/metrics/").content.decode().splitlines()
          if line.startswith("jobclaims_up ")]
    print(f"{time.monotonic() - started:.2f}", *up)
"""


def test_scrapes_of_a_database_that_never_answers_end_in_time_and_bounded_in_number(
    silent_server, vendor
):
    if vendor == "sqlite":
        pytest.skip("SQLite opens a file: no server to connect to")
    scheme = {"postgresql": "postgres", "mysql": "mysql"}[vendor]
    done = run_python(
        SCRAPES,
        env={
            "DATABASE_URL": f"{scheme}://root@127.0.0.1:{silent_server}/jobclaims_hangs",
            "TESTS_HEALTH_TIMEOUT": "0.5",
            "TESTS_ALLOWED_HOSTS": "testserver",
            "PYTHONPATH": os.getcwd(),
        },
    )
    assert done.returncode == 0, done.stderr
    scrapes = [line.split(" ", 1) for line in done.stdout.splitlines()]
    assert [up for _took, up in scrapes] == ["jobclaims_up 0.0"] * 6
    took = [float(each) for each, _up in scrapes]
    # Each waits out the timeout while connecting; past the late reads a
    # process keeps (MOST_LATE, 4), a scrape gives up at once.
    assert all(0.4 < each < 2.5 for each in took[:4]), took
    assert all(each < 0.4 for each in took[4:]), took
    assert "4 earlier health reads of this process still wait" in done.stderr
