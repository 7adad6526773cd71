from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from tests.celeryfleet import fleet, redis_url  # noqa: F401  # Fixtures for the Celery tests.

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
    from tests.factories import claim_in_state

    return {
        state: claim_in_state(state, window=f"2026-11-2{number}")
        for number, state in enumerate(State)
    }
