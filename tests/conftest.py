from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from tests.support.celeryfleet import fleet, redis_url  # noqa: F401  # Fixtures for the Celery tests.

if TYPE_CHECKING:
    from jobclaims.models import JobRun


#: Seconds before each full hour in which no test starts: longer than the
#: tests that claim an hourly window from several processes take under load.
HOUR_MARGIN = 20


@pytest.fixture(autouse=True)
def _clear_of_the_hour() -> None:
    """Start no test in the last seconds of an hour.

    The test commands claim "hourly" and "daily" windows (TIME_ZONE is UTC),
    from several processes or one after another, and expect one window; a
    test that straddles the hour sees two, which is right for the product
    and wrong for the test. Windows at their boundaries are tested with
    explicit keys. The wait costs at most HOUR_MARGIN seconds an hour.
    """
    left = 3600 - time.time() % 3600
    if left < HOUR_MARGIN:
        time.sleep(left + 0.5)


#: Seconds after midnight (UTC) in which a test of the nightly job's health
#: does not start: SCHEDULER_GRACE (3 minutes) past the grace of its fire
#: (ON_TIME, a minute), and a minute to run in.
MIDNIGHT_MARGIN = 5 * 60


@pytest.fixture
def clear_of_midnight() -> None:
    """Start the test out of the minutes after midnight (TIME_ZONE is UTC).

    A test of the nightly job's health reads the real database clock: in
    the minutes after midnight the night's own fire is too young to judge,
    and the page says less than the test expects (seen in CI at 00:00 to
    00:04, a run of the no-live-scheduler check with a claim 2 minutes old,
    inside SCHEDULER_GRACE). Right for the product, wrong for the test.
    ``_clear_of_the_hour`` keeps it from starting just before midnight; the
    wait costs at most MIDNIGHT_MARGIN seconds a day.
    """
    since_midnight = time.time() % 86400
    if since_midnight < MIDNIGHT_MARGIN:
        time.sleep(MIDNIGHT_MARGIN - since_midnight + 0.5)


@pytest.fixture(autouse=True)
def _fleets_unmeasured(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start the fleet tests' processes without coverage
    (scripts/measure-coverage): their schedulers, workers and jobs are timed
    against real clocks, and a measured interpreter starts and runs slower
    than the ones users run. Each other test's processes are measured."""
    marker = request.node.get_closest_marker("xdist_group")
    if marker is not None and marker.args == ("fleets",):
        monkeypatch.delenv("COVERAGE_PROCESS_START", raising=False)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Write the claim statements once per process, before any test counts a
    claim's statements: on MariaDB, writing them asks the server whether it
    runs Galera, once, which is no statement of any one claim."""
    from django.db import connections

    from jobclaims.claims.statements import claim_statements

    with django_db_blocker.unblock():
        for alias in connections:
            claim_statements(connections[alias])


@pytest.fixture
def vendor() -> str:
    from django.db import connection

    return connection.vendor


@pytest.fixture
def one_of_each() -> dict[str, JobRun]:
    """A claim of charge_invoices in each state, one window apiece."""
    from jobclaims.claims.rule import State
    from tests.support.factories import claim_in_state

    return {
        state: claim_in_state(state, window=f"2026-11-2{number}")
        for number, state in enumerate(State)
    }


@pytest.fixture
def deployed_now() -> None:
    """Record the test project's commands as deployed as the test starts.

    ``migrate`` records them (``KnownCommand``) when the test database is
    created, and each transaction test's flush records them again; a long
    session of other tests between makes them look deployed minutes ago,
    and health then counts the scheduled jobs' fires from then and finds
    no scheduler running them (``SCHEDULER_GRACE``). A test that judges
    every job's health starts from a deploy of its own.
    """
    from jobclaims.models import KnownCommand
    from jobclaims.time.clock import DatabaseNow

    KnownCommand.objects.update(first_seen_at=DatabaseNow())


@pytest.fixture
def changes(db: None) -> Callable[[], int]:
    """How many changes the stored schedules have had since the test began.

    The count's row is made first: a row made by a change starts at a
    random number (``count_a_change()``), so only a difference counts."""
    from jobclaims.jobs.stored_schedules import count_a_change, generation

    count_a_change()
    baseline = generation()
    return lambda: generation() - baseline


@pytest.fixture
def sqlite_locked_past_the_busy_timeout() -> Iterator[None]:
    """Another session holds the SQLite file's write lock until a statement
    of this connection has waited out its busy timeout (100 ms) once, then
    commits: a barrier on that failure, not a timer."""
    from django.db import OperationalError, connection, connections

    from jobclaims.models import JobRun

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        [(busy_timeout,)] = cursor.fetchall()
        cursor.execute("PRAGMA busy_timeout = 100")
    other = connections.create_connection("default")
    other.set_autocommit(False)
    with other.cursor() as cursor:  # A write takes the lock even when it matches no row.
        cursor.execute(f"UPDATE {JobRun._meta.db_table} SET id = id WHERE 0")

    def let_go_once_waited_out(execute, sql, params, many, context):
        try:
            return execute(sql, params, many, context)
        except OperationalError:
            other.commit()
            raise

    with connection.execute_wrapper(let_go_once_waited_out):
        yield
    other.close()
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout)}")
