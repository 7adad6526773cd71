"""A Celery project for tests/contrib/test_celery.py: its app, beat schedule and tasks.

The test starts real ``celery beat`` and ``celery worker`` processes with
``-A tests.support.celeryapp``, on a Redis of its own (``TESTS_CELERY_REDIS``) and
the test database the race kit names. ``tick`` is sent every second by
each beat, and claimed per window of ``TICK_WINDOW``.
"""

from __future__ import annotations

import datetime
import os
import time

import django
from celery import Celery, shared_task

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from jobclaims.running.children import use_parents_databases  # noqa: E402  # Needs Django set up.

# The test databases the race kit names; the worker forks its pool after
# this, so nothing is connected yet (a connection must not be shared).
use_parents_databases()

from jobclaims.contrib.celery import ClaimedTask  # noqa: E402  # Needs Django set up.
from jobclaims.jobs.claiming import claimed  # noqa: E402
from jobclaims.models import JobRun, JobSkip  # noqa: E402
from tests.testapp.models import Charge  # noqa: E402

redis = os.environ.get("TESTS_CELERY_REDIS", "redis://127.0.0.1:6379")
app = Celery(
    "tests", broker=os.environ.get("TESTS_CELERY_BROKER", f"{redis}/0"), backend=f"{redis}/1"
)
app.conf.update(
    # A queue of the test's own: a RabbitMQ is shared by every test run.
    task_default_queue=os.environ.get("TESTS_CELERY_QUEUE", "celery"),
    # Redis hands an unacknowledged message out again after this many seconds.
    broker_transport_options={
        "visibility_timeout": float(os.environ.get("TESTS_CELERY_VISIBILITY", 3600)),
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
    beat_schedule={"tick": {"task": "tests.tick", "schedule": 1.0}},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    # Modules a test adds, as a project's own: tests.support.misordered.tasks.
    include=os.environ.get("TESTS_CELERY_INCLUDE", "").split(),
)

TICK_WINDOW = datetime.timedelta(seconds=2)


@shared_task(
    name="tests.tick",
    base=ClaimedTask,
    bind=True,
    claim_window=TICK_WINDOW,
    claim_lease=TICK_WINDOW,
)
def tick(self: ClaimedTask) -> str:
    run = self.claimed_run
    Charge.objects.create(job=run.job, window=run.window, pid=os.getpid(), attempt=run.attempt)
    return run.window


def _work(run: JobRun, seconds: float) -> str:
    """Mark that the run started (step 0), work ``seconds``, then mark it finished (1)."""
    fields = {"job": run.job, "window": run.window, "pid": os.getpid(), "attempt": run.attempt}
    Charge.objects.create(**fields, step=0)
    time.sleep(seconds)
    Charge.objects.create(**fields, step=1)
    return run.window


@shared_task(
    name="tests.slow",
    base=ClaimedTask,
    bind=True,
    claim_window="hourly",
    claim_lease=datetime.timedelta(seconds=3),
    acks_late=True,
    reject_on_worker_lost=True,
)
def slow(self: ClaimedTask, seconds: float) -> str:
    return _work(self.claimed_run, seconds)


#: tests.outlived's windows are no longer than its lease, so a run killed
#: in one window is always taken over in a later one.
OUTLIVED_WINDOW = datetime.timedelta(seconds=3)


@shared_task(
    name="tests.outlived",
    base=ClaimedTask,
    bind=True,
    claim_window=OUTLIVED_WINDOW,
    claim_lease=OUTLIVED_WINDOW,
    acks_late=True,
    reject_on_worker_lost=True,
)
def outlived(self: ClaimedTask, seconds: float) -> str:
    return _work(self.claimed_run, seconds)


@shared_task(name="tests.retried", base=ClaimedTask, bind=True, claim_window="hourly")
def retried(self: ClaimedTask) -> int:
    """Ask Celery for one retry, then succeed."""
    run = self.claimed_run
    Charge.objects.create(job=run.job, window=run.window, pid=os.getpid(), attempt=run.attempt)
    if self.request.retries == 0:
        raise self.retry(countdown=0.5)
    return run.attempt


@claimed("tests.helper", window="hourly")
def helper() -> None:
    Charge.objects.create(job="tests.helper", window="", pid=os.getpid(), attempt=1)


@shared_task(name="tests.calls_claimed")
def calls_claimed() -> None:
    """A task that calls a ``@claimed`` function: no wrong order, so workers start."""
    helper()


@shared_task(
    name="tests.killed_then_retried",
    base=ClaimedTask,
    bind=True,
    claim_window="hourly",
    claim_lease=datetime.timedelta(seconds=2),
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=1,
)
def killed_then_retried(self: ClaimedTask) -> int:
    """Work until killed; taken over, ask Celery for the one retry it allows, then succeed."""
    run = self.claimed_run
    fields = {"job": run.job, "window": run.window, "pid": os.getpid(), "attempt": run.attempt}
    Charge.objects.create(**fields, step=0)
    if run.attempt == 1:
        time.sleep(60)  # The test SIGKILLs this process here.
    if self.request.retries == 0:
        raise self.retry(countdown=0.2)
    Charge.objects.create(**fields, step=1)
    return run.attempt


@shared_task(name="tests.part", base=ClaimedTask, bind=True, claim_window="hourly")
def part(self: ClaimedTask, number: int) -> int:
    """A chord's member: of three in one window, one runs and two are refused."""
    run = self.claimed_run
    Charge.objects.create(job=run.job, window=run.window, pid=os.getpid(), attempt=number)
    return number


@shared_task(name="tests.gather")
def gather(results: list[object]) -> list[object]:
    """A chord's callback: records that it ran, with how many results (attempt)
    and how many of them are refusals (step)."""
    refusals = sum(isinstance(result, dict) for result in results)
    Charge.objects.create(
        job="tests.gather", window="", pid=os.getpid(), attempt=len(results), step=refusals
    )
    return results


@shared_task(
    name="tests.outlasted",
    base=ClaimedTask,
    bind=True,
    claim_window="hourly",
    claim_lease=datetime.timedelta(seconds=2),
    acks_late=True,
)
def outlasted(self: ClaimedTask) -> int:
    """Outlast Redis's visibility timeout: run until a second delivery was
    refused twice, so it came back once for this run's lease."""
    run = self.claimed_run
    fields = {"job": run.job, "window": run.window, "pid": os.getpid(), "attempt": run.attempt}
    Charge.objects.create(**fields, step=0)
    refusals = JobSkip.objects.filter(job=run.job).values_list("count", flat=True)
    deadline = time.monotonic() + 30
    while sum(refusals.all()) < 2 and time.monotonic() < deadline:  # all(): read again.
        time.sleep(0.1)
    Charge.objects.create(**fields, step=1)
    return run.attempt


@shared_task(name="tests.fire", base=ClaimedTask, bind=True, claim_allow_overlap=True)
def fire(self: ClaimedTask, tag: str = "") -> str:
    """A scheduled task's body (tests/contrib/test_celery_fires.py) that counts its runs."""
    from tests.testapp.tasks import record_fire

    return record_fire(tag, self.claimed_run)


@shared_task(name="tests.unclaimed_fire")
def unclaimed_fire() -> None:
    """A task that cannot take a fire's claim over: check E009 refuses to schedule it."""


def mark(path: str, what: str, run: JobRun, retries: int = 0) -> None:
    """Append one line for a body's start, stop or end: O_APPEND, so lines of
    bodies that run at once never mix, and each is counted once."""
    line = f"{what} {time.time():.3f} {os.getpid()} {run.attempt} {retries}\n"
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)


@shared_task(
    name="tests.retried_copies",
    base=ClaimedTask,
    bind=True,
    claim_window="hourly",
    claim_lease=datetime.timedelta(seconds=3),
    acks_late=True,
    reject_on_worker_lost=True,
)
def retried_copies(self: ClaimedTask, path: str, countdown: float, seconds: float) -> int:
    """Retry once after ``countdown``; the retry works ``seconds``, longer than
    Redis's visibility timeout in the test, which hands its message out again."""
    run, retries = self.claimed_run, self.request.retries
    mark(path, "start", run, retries)
    if retries == 0:
        raise self.retry(countdown=countdown)
    time.sleep(seconds)
    mark(path, "end", run, retries)
    return run.attempt


@shared_task(
    name="tests.cancellable",
    base=ClaimedTask,
    bind=True,
    claim_window="hourly",
    claim_lease=datetime.timedelta(seconds=3),
    acks_late=True,
    reject_on_worker_lost=True,
)
def cancellable(self: ClaimedTask, path: str, seconds: float) -> int:
    """Work ``seconds`` in short steps, marking its start and how it ended."""
    run = self.claimed_run
    mark(path, "start", run)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)
    except BaseException:
        mark(path, "stop", run)
        raise
    mark(path, "end", run)
    return run.attempt


@shared_task(
    name="tests.limited",
    base=ClaimedTask,
    bind=True,
    claim_window="hourly",
    time_limit=2,
)
def limited(self: ClaimedTask, path: str) -> None:
    """Work past Celery's hard time limit, until its worker terminates it."""
    mark(path, "start", self.claimed_run)
    while True:
        time.sleep(0.05)


@shared_task(name="tests.link", base=ClaimedTask, bind=True, claim_window="hourly")
def link(self: ClaimedTask, previous: object, path: str) -> str:
    """A chain's claimed link: the second in one window is refused."""
    mark(path, "start", self.claimed_run)
    return path


@shared_task(name="tests.after")
def after(path: str) -> None:
    """The link after a claimed one: runs only if that one ran."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(descriptor, b"after\n")
    os.close(descriptor)
