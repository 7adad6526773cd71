"""The task fires benchmark's Django task (benchmarks/task_fires.py): it does nothing.

The benchmark runs no worker: it measures how soon the schedulers enqueue.
"""

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport.
    from django_tasks import task

from jobclaims import claimed


@task
@claimed(allow_overlap=True)
def noop(number: int = 0) -> None:
    """Scheduled a thousand times over, by JOBCLAIMS["TASK_SCHEDULES"]."""
