"""The bound on a wait for a synchronous standby: the watchdog cancels, and only then.

What a real standby that does not answer does to a claim is in
test_pg_failover.py; these tests hold the watchdog to its deadline with a
statement that sleeps.
"""

from __future__ import annotations

import datetime
import time

import pytest
from django.db import OperationalError, connection
from django.test import override_settings

from jobclaims.claims import standby

pytestmark = pytest.mark.django_db

SHORT = override_settings(JOBCLAIMS={"STANDBY_TIMEOUT": datetime.timedelta(milliseconds=200)})


@pytest.fixture
def postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("only PostgreSQL waits for a synchronous standby")
    connection.ensure_connection()


@SHORT
def test_a_statement_that_outlasts_the_standby_timeout_is_cancelled(postgresql):
    started = time.monotonic()
    with (
        pytest.raises(OperationalError),
        standby.bounded(connection) as watch,
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT pg_sleep(5)")
    assert watch.fired
    assert time.monotonic() - started < 3


@SHORT
def test_a_statement_that_ends_in_time_is_not_cancelled(postgresql):
    with standby.bounded(connection) as watch, connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.05)")
    time.sleep(0.3)  # Past the deadline: a disarmed watch stays quiet.
    assert not watch.fired


def test_nothing_is_armed_where_no_commit_waits_for_a_standby():
    connection.ensure_connection()
    with standby.bounded(connection) as watch:
        pass
    assert (watch.deadline == float("inf")) == (connection.vendor != "postgresql")


@SHORT
@pytest.mark.django_db(transaction=True)
def test_after_a_cancel_the_next_statement_runs_on_a_session_no_cancel_can_reach(postgresql):
    # A cancel request sent as a wait ended anyway lands on whatever the
    # session runs next: in a nemesis run, the next claim's first read.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (cancelled_session,) = cursor.fetchone()
    with (
        pytest.raises(OperationalError),
        standby.bounded(connection) as watch,
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT pg_sleep(5)")
    assert watch.fired
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (next_session,) = cursor.fetchone()
    assert next_session != cancelled_session
