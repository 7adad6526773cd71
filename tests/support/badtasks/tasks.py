"""A claimed task with an option it cannot run with: check jobclaims.E008."""

from __future__ import annotations

from celery import shared_task

from jobclaims.contrib.celery import ClaimedTask


@shared_task(name="tests.bad_overlap", base=ClaimedTask, claim_allow_overlap="no")
def bad_overlap() -> None: ...
