from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command


def run_command(name: str, *args: str) -> tuple[str, str, int]:
    """Run a management command in this process: (stdout, stderr, exit status)."""
    out, err = StringIO(), StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=err)
    except CommandError as error:
        err.write(str(error))
        return out.getvalue(), err.getvalue(), 1
    return out.getvalue(), err.getvalue(), 0


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Write the claim statements once per process, before any test counts a
    claim's statements: on MariaDB, writing them asks the server whether it
    runs Galera, once, which is no statement of any one claim."""
    from django.db import connections

    from jobclaims.sql import claim_statements

    with django_db_blocker.unblock():
        for alias in connections:
            claim_statements(connections[alias])


@pytest.fixture
def vendor() -> str:
    from django.db import connection

    return connection.vendor
