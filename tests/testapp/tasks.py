"""Django tasks of the test project: claimed once per window, and scheduled ones' bodies.

``django.tasks`` is Django 6.0's; on Django 5.2 the ``django-tasks`` backport
provides the same API as ``django_tasks``.
"""

from __future__ import annotations

import os

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport.
    from django_tasks import task

from jobclaims import claimed
from jobclaims.jobs.claiming import claimed_run
from jobclaims.models import JobRun


@task
@claimed("nightly_export", window="daily")
def nightly_export() -> str:
    return "exported"


@task
def unclaimed_export() -> str:
    """A task that tests/jobs/test_claiming.py tries to wrap in @claimed, the wrong way round."""
    return "exported"


def record_fire(tag: object = "", run: JobRun | None = None) -> str:
    """Append this run's job, window, attempt and ``tag`` to ``TESTS_FIRES_FILE``:
    one ``write()`` in O_APPEND mode per run, which processes never interleave."""
    run = run or claimed_run()
    line = f"{run.job} {run.window} {run.attempt} {tag} {os.getpid()}\n"
    descriptor = os.open(os.environ["TESTS_FIRES_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)
    return run.window


@task
@claimed(allow_overlap=True)
def counted_fire(tag: str = "") -> str:
    """A scheduled task's body (tests/scheduling/test_task_fires.py) that counts its runs."""
    return record_fire(tag)


@task
@claimed(allow_overlap=True)
def failing_fire() -> None:
    """A scheduled task's body that records its run, then fails."""
    record_fire("failed")
    raise RuntimeError("the report server is down")


@task
def unclaimed_fire() -> None:
    """A task that cannot take a fire's claim over: check E009 refuses to schedule it."""
