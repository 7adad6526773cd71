"""A job starts only on a lease it still holds: a claim whose commit stalled
past its lease steps aside, with real processes on a real database.

Each test stalls one job process's claim between the moment the database
stamps its lease and the moment the claim returns, for longer than the
lease, the way a cluster's node fault or a synchronous standby does:

- PostgreSQL and MariaDB: this test's session holds an uncommitted row of
  the same window, so the claim's INSERT, its lease already stamped, waits
  on the key until the session rolls back.
- SQLite: this test's session holds a read transaction open, so the
  claim's INSERT, written, waits within SQLite's busy timeout for the lock
  its commit needs.

Then the job must not start: no charge is written, the process exits 0 and
says nothing at -v 0, as a skip does, and the next instance runs the window.
"""

from __future__ import annotations

import datetime
import os

import pytest
from django.db import connection, transaction

from jobclaims.models import JobRun
from jobclaims.testing import Instance, start
from jobclaims.time.clock import database_now
from tests.support.helpers import run_command, wait_until
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = "2026-12-02T02:00+00:00"
LEASE = datetime.timedelta(seconds=1)
#: How far past the stalled claim's lease the stall lasts.
PAST_THE_LEASE = datetime.timedelta(seconds=0.5)


def waiting_claims() -> int:
    """How many sessions wait on a row lock, as the server reports them."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        else:
            # Not innodb_trx: MariaDB refreshes it only when it was not read
            # for 0.1 s, which a poll never lets happen. The claim's own
            # INSERT, as opposed to the one that never waits (SET STATEMENT).
            cursor.execute(
                "SELECT count(*) FROM information_schema.processlist "
                "WHERE db = DATABASE() AND info LIKE %s",
                ["INSERT INTO%jobclaims_jobrun%"],
            )
        (count,) = cursor.fetchone()
    return int(count)


def sqlite_writer_waits() -> bool:
    """Whether a writer holds SQLite's reserved lock: its rollback journal exists."""
    return os.path.exists(f"{connection.settings_dict['NAME']}-journal")


def stall_past_the_lease() -> None:
    """Wait, by the database clock, until a lease stamped now has ended."""
    ended = database_now() + LEASE + PAST_THE_LEASE
    wait_until(lambda: database_now() >= ended, "the stalled claim's lease to end")


def start_stalled_claim(verbosity: str = "0") -> Instance:
    """Start one job whose claim's commit returns after its lease ended."""
    with transaction.atomic():
        if connection.vendor == "sqlite":
            # A read transaction's shared lock holds back any commit.
            assert not JobRun.objects.exists()
            waits = sqlite_writer_waits
        else:
            # An uncommitted row of the window: the claim's INSERT waits on its key.
            JobRun.objects.create(job="charge_ledger", window=WINDOW, owner="test session")
            waits = lambda: waiting_claims() > 0  # noqa: E731
        [stalled] = start("charge_ledger", "--window", WINDOW, "--lease", "1", "-v", verbosity)
        wait_until(waits, "the claim to wait on this session")
        stall_past_the_lease()
        if connection.vendor != "sqlite":
            transaction.set_rollback(True)
    return stalled


def test_a_claim_whose_commit_returned_after_its_lease_does_not_start_its_job():
    stalled = start_stalled_claim()
    result = stalled.finish()
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert not Charge.objects.exists(), "the job ran on a lease that had ended"
    # Stepped aside, not lost: the next instance takes the window over and runs it.
    _out, err, status = run_command("charge_ledger", "--window", WINDOW, "--lease", "30")
    assert status == 0, err
    assert list(Charge.objects.values_list("window", flat=True)) == [WINDOW]


def test_a_stalled_claim_says_why_it_did_not_start():
    result = start_stalled_claim(verbosity="1").finish()
    assert result.returncode == 0, result.stderr
    assert "did not start: its claim returned with" in result.stdout
    assert "nothing ran" in result.stdout
    assert not Charge.objects.exists()
