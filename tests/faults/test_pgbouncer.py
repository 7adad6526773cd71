"""Claims hold when every instance reaches PostgreSQL through PgBouncer.

In transaction pooling, which is how PgBouncer usually runs in production,
each transaction of a client may run on a different server connection, so
anything kept in a session (advisory locks, SET, server-side cursors) is
lost between statements. Claims keep nothing in the session: the unique
constraints, row locks inside one transaction and compare-and-set updates
decide. These tests race real processes of the test job through the pooler
(started by scripts/start-pgbouncer) on the test database.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from django.db import connection

from jobclaims.models import JobRun
from jobclaims.testing import race
from tests.support.helpers import outcomes, unavailable
from tests.testapp.models import Charge

if TYPE_CHECKING:
    import psycopg

pytestmark = pytest.mark.django_db(transaction=True)

POOLER_HOST = "127.0.0.1"
POOLER_PORT = int(os.environ.get("PGBOUNCER_PORT", "6432"))
# tests/settings.py reads this in the processes race() starts.
THROUGH_THE_POOLER = {"TESTS_POSTGRES_POOLER": f"{POOLER_HOST}:{POOLER_PORT}"}


def admin_console() -> psycopg.Connection:
    """A connection to PgBouncer's admin console, which speaks simple queries only."""
    import psycopg

    return psycopg.connect(
        host=POOLER_HOST,
        port=POOLER_PORT,
        dbname="pgbouncer",
        user=connection.settings_dict["USER"] or "postgres",
        autocommit=True,
        cursor_factory=psycopg.ClientCursor,
        connect_timeout=5,
    )


def transactions_pooled() -> int:
    """How many transactions PgBouncer has run on this worker's test database."""
    with admin_console() as console:
        cursor = console.execute("SHOW STATS")
        columns = [column.name for column in cursor.description or ()]
        for row in cursor.fetchall():
            stats = dict(zip(columns, row, strict=True))
            if stats["database"] == connection.settings_dict["NAME"]:
                return int(stats["total_xact_count"])
    return 0


def close_pooled_connections() -> None:
    """Make PgBouncer let go of the test database, so the test run can drop it."""
    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    with admin_console() as console:
        console.execute(f"KILL {name}")
        console.execute(f"RESUME {name}")


@pytest.fixture
def pooled() -> Iterator[None]:
    """Ensure PgBouncer answers, and that the race really went through it."""
    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer pools PostgreSQL connections only")
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed, which PgBouncer's admin console needs")
    try:
        before = transactions_pooled()
    except psycopg.OperationalError as error:
        unavailable(
            f"PgBouncer is not reachable at {POOLER_HOST}:{POOLER_PORT} "
            f"(start it with scripts/start-pgbouncer): {error}"
        )
    try:
        yield
        assert transactions_pooled() > before, "the instances did not go through PgBouncer"
    finally:
        close_pooled_connections()


@pytest.mark.parametrize("trial", range(8))
def test_two_instances_through_pgbouncer_charge_once(pooled, trial):
    window = f"2026-11-29T{trial:02d}:00"
    results = race("charge_ledger", "--window", window, instances=2, env=THROUGH_THE_POOLER)
    assert outcomes(results) == {"ran": 1, "skipped": 1}, results
    assert Charge.objects.count() == 1
    run = JobRun.objects.get()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 1)


def test_a_failed_window_is_retried_by_one_of_two_instances_through_pgbouncer(pooled):
    window = "2026-11-29T10:00"
    [failed] = race(
        "charge_ledger", "--window", window, "--fail", instances=1, env=THROUGH_THE_POOLER
    )
    assert failed.outcome == "failed", failed
    # The retry is a takeover: a row lock and a compare-and-set, which must
    # share one transaction even when the pooler switches server connections.
    results = race(
        "charge_ledger", "--window", window, "--hold", "0.5", instances=2, env=THROUGH_THE_POOLER
    )
    assert outcomes(results) == {"ran": 1, "skipped": 1}, results
    assert Charge.objects.count() == 2
    run = JobRun.objects.get()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 2)
