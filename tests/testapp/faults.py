"""Faults the tests inject into real processes of the test jobs, by environment.

- ``TESTAPP_FAILING_RECEIVER``: the name of a jobclaims signal whose
  receiver raises.
"""

from __future__ import annotations

import os

from jobclaims import signals


def install() -> None:
    if name := os.environ.get("TESTAPP_FAILING_RECEIVER"):
        getattr(signals, name).connect(_failing_receiver, weak=False)


def _failing_receiver(sender, **kwargs):
    raise RuntimeError("the metrics backend is down")
