"""``@claimed`` under ``@shared_task``: the order a worker refuses to start with."""

from __future__ import annotations

import os
from collections.abc import Callable

from celery import shared_task

from jobclaims.jobs.claiming import claimed
from tests.testapp.models import Charge


@shared_task(name="tests.claimed_under")
@claimed(window="hourly")
def claimed_under() -> None:
    Charge.objects.create(job="tests.claimed_under", window="", pid=os.getpid(), attempt=1)


def logged(function: Callable[..., object]) -> Callable[..., object]:
    """A decorator of the project's own, written without ``functools.wraps``."""

    def inner(*args: object, **kwargs: object) -> object:
        return function(*args, **kwargs)

    return inner


@shared_task(name="tests.claimed_under_a_wrapper")
@logged
@claimed(window="hourly")
def claimed_under_a_wrapper() -> None:
    job = "tests.claimed_under_a_wrapper"
    Charge.objects.create(job=job, window="", pid=os.getpid(), attempt=1)
