"""Faults the tests inject into real processes of the test jobs, by environment.

- ``TESTAPP_FAILING_RECEIVER``: the name of a jobclaims signal whose
  receiver raises.
- ``TESTAPP_STOP_AROUND_RELEASE``: ``before`` or ``after``; the process
  stops itself (SIGSTOP) just before or just after the UPDATE that records
  its outcome, having printed a line that says so, until the test sends
  SIGCONT. Whatever the test does meanwhile (a stop signal, a takeover)
  lands at that very moment.
- ``TESTAPP_LOG``: a level, such as ``INFO``, at which the ``jobclaims``
  logger writes to stderr.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from django.db.backends.signals import connection_created

from jobclaims import signals


def install() -> None:
    if name := os.environ.get("TESTAPP_FAILING_RECEIVER"):
        getattr(signals, name).connect(_failing_receiver, weak=False)
    if os.environ.get("TESTAPP_STOP_AROUND_RELEASE"):
        connection_created.connect(_wrap_statements, weak=False)
    if level := os.environ.get("TESTAPP_LOG"):
        logger = logging.getLogger("jobclaims")
        logger.setLevel(level)
        logger.addHandler(logging.StreamHandler(sys.stderr))


def _failing_receiver(sender, **kwargs):
    raise RuntimeError("the metrics backend is down")


def _wrap_statements(sender, connection, **kwargs):
    connection.execute_wrappers.append(_stop_around_release)


def _stop_around_release(execute, sql, params, many, context):
    # release() is the one UPDATE whose status parameter is an outcome.
    outcome = params.get("status") if isinstance(params, dict) else None
    releasing = sql.startswith("UPDATE") and outcome in ("succeeded", "failed")
    when = os.environ["TESTAPP_STOP_AROUND_RELEASE"]
    if releasing and when == "before":
        _stop("stopped before recording the outcome")
    result = execute(sql, params, many, context)
    if releasing and when == "after":
        _stop("stopped after recording the outcome")
    return result


def _stop(what: str) -> None:
    print(f"testapp: {what}", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
