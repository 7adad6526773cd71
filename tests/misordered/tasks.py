"""``@claimed`` under ``@shared_task``: the order a worker refuses to start with."""

from __future__ import annotations

import os

from celery import shared_task

from jobclaims.claiming import claimed
from tests.testapp.models import Charge


@shared_task(name="tests.claimed_under")
@claimed(window="hourly")
def claimed_under() -> None:
    Charge.objects.create(job="tests.claimed_under", window="", pid=os.getpid(), attempt=1)
