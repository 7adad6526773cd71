"""The task fires benchmark's Celery task, on the broker BENCH_CELERY_BROKER names."""

import os

from celery import Celery, shared_task

from jobclaims.contrib.celery import ClaimedTask

app = Celery("benchmarks", broker=os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(task_default_queue=os.environ.get("BENCH_CELERY_QUEUE", "bench"))


@shared_task(name="bench.noop", base=ClaimedTask, claim_allow_overlap=True)
def noop(number: int = 0) -> None:
    """Scheduled a thousand times over, by JOBCLAIMS["TASK_SCHEDULES"]."""
