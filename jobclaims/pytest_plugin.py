"""pytest fixtures for proving a job runs once; loaded when pytest starts
(the ``pytest11`` entry point), used only by the tests that ask for them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jobclaims.testing import InstanceResult, race


@pytest.fixture
def race_command(transactional_db: None) -> Callable[..., list[InstanceResult]]:
    """``race()``, with a test database other processes can see.

    ``race_command("charge_invoices", instances=2)`` returns what each of two
    instances released at the same instant did.
    """
    return race
