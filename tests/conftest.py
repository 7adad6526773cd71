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


@pytest.fixture
def vendor() -> str:
    from django.db import connection

    return connection.vendor
