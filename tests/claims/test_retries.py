"""What a claim does when the database asks it to try again.

Real errors from a real second session: a deadlock, a lock wait that ran
out, a row in the way that another transaction is writing. Races of real
processes that meet them are in test_dead_holder.py and test_isolation.py.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator

import pytest
from django.db import DatabaseError, IntegrityError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from jobclaims.claims import retries
from jobclaims.claims.rule import State
from jobclaims.claims.statements import claim_statements
from jobclaims.models import JobRun, JobSkip
from tests.support.factories import claim_in_state
from tests.support.helpers import run_command
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = JobRun._meta.db_table
WINDOW = "2026-11-29T10:00+00:00"


@pytest.fixture
def other() -> Iterator[BaseDatabaseWrapper]:
    """Another session on the test database, in a transaction of its own."""
    session = connections.create_connection("default")
    # The tests end its transaction, or use it, from a thread of their own.
    session.inc_thread_sharing()
    session.set_autocommit(False)
    yield session
    session.rollback()
    session.close()
    session.dec_thread_sharing()


def shorten_lock_waits(session: BaseDatabaseWrapper) -> None:
    """Make a statement of ``session`` that waits on a lock give up soon."""
    setting = {
        "postgresql": "SET lock_timeout = '100ms'",
        "mysql": "SET SESSION innodb_lock_wait_timeout = 1",
        "sqlite": "PRAGMA busy_timeout = 100",
    }
    with session.cursor() as cursor:
        cursor.execute(setting[session.vendor])


def write_lock(session: BaseDatabaseWrapper, run: JobRun) -> None:
    """Lock ``run``'s row in ``session`` (on SQLite, the whole file)."""
    with session.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET status = status WHERE id = %s", [run.pk])


def test_a_lock_wait_that_runs_out_is_transient(other):
    run = claim_in_state(State.ACTIVE)
    write_lock(other, run)
    shorten_lock_waits(connection)
    with pytest.raises(DatabaseError) as raised:
        write_lock(connection, run)
    assert retries.is_transient(raised.value)


def test_a_deadlock_is_transient(other):
    if not connection.features.has_select_for_update:
        pytest.skip("SQLite has no row locks, so no deadlock: its lock waits run out instead")
    first, second = claim_in_state(State.ACTIVE), claim_in_state(State.ACTIVE, window="2026-11-30")
    connection.set_autocommit(False)
    try:
        write_lock(connection, first)
        write_lock(other, second)
        errors: list[DatabaseError] = []

        def cross() -> None:
            try:
                write_lock(other, first)
            except DatabaseError as error:
                errors.append(error)

        crossing = threading.Thread(target=cross)
        crossing.start()
        try:
            write_lock(connection, second)
        except DatabaseError as error:
            errors.append(error)
            connection.rollback()
        else:
            connection.rollback()  # The other session was the victim.
        crossing.join()
    finally:
        connection.set_autocommit(True)
    [deadlock] = errors
    assert retries.is_transient(deadlock), deadlock


def test_a_taken_unique_key_is_not_transient():
    claim_in_state(State.ACTIVE)
    with pytest.raises(IntegrityError) as raised:
        claim_in_state(State.ACTIVE)
    assert not retries.is_transient(raised.value)


def test_a_claim_waits_out_a_contender_clearing_the_dead_holder_then_claims(other):
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite has no row locks; test_dead_holder.py races it")
    dead = claim_in_state(State.EXPIRED, window="2026-11-29T09:00+00:00", holds_job=True)
    with other.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {TABLE} WHERE id = %s FOR UPDATE", [dead.pk])
    # The contender gives up, clearing nothing: this claim must then clear it.
    threading.Timer(0.3, other.rollback).start()
    run = JobRun.objects.claim("charge_invoices", WINDOW, lease=datetime.timedelta(minutes=5))
    assert run is not None
    dead.refresh_from_db()
    assert dead.holds_job is None
    assert not JobSkip.objects.exists()


def test_a_job_whose_claim_keeps_timing_out_exits_with_a_clear_error_and_does_not_run(
    other, monkeypatch
):
    monkeypatch.setattr(retries, "RETRY_FOR", 0.5)
    # Another instance's first claim of the window, not yet committed.
    with other.cursor() as cursor:
        rival = JobRun(job="charge_ledger", window=WINDOW, owner="web-2:1:0", holds_job=True)
        claim_statements(other).insert(cursor, rival, datetime.timedelta(minutes=5))
    shorten_lock_waits(connection)
    _, err, status = run_command("charge_ledger", "--window", WINDOW)
    assert status == 1
    assert f"Could not claim charge_ledger {WINDOW}: the database kept answering " in err
    assert "nothing ran; the next run tries again" in err
    assert not Charge.objects.exists()


def test_a_release_that_meets_a_lock_wait_that_runs_out_is_tried_again(other):
    run = JobRun.objects.claim("charge_invoices", WINDOW, lease=datetime.timedelta(minutes=5))
    assert run is not None
    # An operator's expire, in a transaction that ends a moment later.
    write_lock(other, run)
    threading.Timer(0.5, other.commit).start()
    shorten_lock_waits(connection)
    assert run.release()
    run.refresh_from_db()
    assert run.status == JobRun.Status.SUCCEEDED
