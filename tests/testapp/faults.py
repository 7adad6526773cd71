"""Faults the tests inject into real processes of the test jobs, by environment.

- ``TESTAPP_FAILING_RECEIVER``: the name of a jobclaims signal whose
  receiver raises.
- ``TESTAPP_STOP_AROUND_RELEASE``: ``before`` or ``after``; the process
  stops itself (SIGSTOP) just before or just after the UPDATE that records
  its outcome, having printed a line that says so, until the test sends
  SIGCONT. Whatever the test does meanwhile (a stop signal, a takeover)
  lands at that very moment.
- ``TESTAPP_KILL_BEFORE_ENQUEUE``: a file's path; the first process of
  those given it to enqueue a task fire it claimed creates the file and kills
  itself (SIGKILL) there: before the INSERT of django-tasks-db's message,
  inside the claim's transaction, or before Celery publishes the message,
  after the claim committed.
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
    if os.environ.get("TESTAPP_KILL_BEFORE_ENQUEUE"):
        connection_created.connect(_kill_before_enqueue_statement, weak=False)
        if "celery" in sys.modules or os.environ.get("TESTS_CELERY_REDIS"):
            from celery.signals import before_task_publish

            before_task_publish.connect(_kill_before_enqueue, weak=False)
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


def _kill_before_enqueue_statement(sender, connection, **kwargs):
    connection.execute_wrappers.append(_kill_before_task_insert)


def _kill_before_task_insert(execute, sql, params, many, context):
    if sql.startswith("INSERT") and "dbtaskresult" in sql:
        _kill_before_enqueue()
    return execute(sql, params, many, context)


def _kill_before_enqueue(*args, **kwargs):
    try:
        os.close(os.open(os.environ["TESTAPP_KILL_BEFORE_ENQUEUE"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return  # Another process died there already.
    print("testapp: killed before enqueueing", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
