"""Which database clusters the cluster tests may use, from the environment.

The clusters are started by scripts (scripts/start-galera,
scripts/start-pg-replica), not by the suite, and a laptop's ``make test``
runs without them: their tests skip, naming the variable to set. CI must
never skip them silently, so with ``CI=true`` a missing variable fails.
"""

from __future__ import annotations

import os

import pytest


def cluster_setting(variable: str, how: str) -> str:
    """The value of ``variable``; skip (fail under CI) when it is not set."""
    value = os.environ.get(variable, "")
    if value:
        return value
    message = f"{variable} is not set: {how}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; CI=true needs the cluster tests to run")
    pytest.skip(message)
