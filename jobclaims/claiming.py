"""Claims for code that is not a management command: tasks and functions.

``claim()`` and ``@claimed`` give a Celery task, a Django task or a plain
function what ``JobCommand`` gives a command: one run per window, a lease
renewed while the code runs, and the outcome recorded on the claim.
"""

from __future__ import annotations

import datetime
import functools
import logging
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from django.db import DatabaseError, connections

from jobclaims import durations, leases, retries
from jobclaims.claims.rule import Refusal
from jobclaims.clock import database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import ClaimLost, JobCancelled, JobTimedOut, LeaseLapsed, NotClaimed
from jobclaims.heartbeat import Heartbeat, lease_deadline
from jobclaims.models import JobRun
from jobclaims.slots import Slots
from jobclaims.stopping import stops_held_back
from jobclaims.windows import WindowSpec

logger = logging.getLogger("jobclaims")

#: Set on every ``@claimed`` function (and copied by ``functools.wraps`` to
#: a decorator's wrapper of one), so a Celery task's body can be known as
#: one before the task runs: see ``is_claimed()``.
CLAIMED_MARK = "jobclaims_claimed"

#: Why ``@claimed`` under a Celery task decorator is refused, and the fix.
CELERY_BODY_PROBLEM = (
    "@claimed cannot be the body of a Celery task: a refused call would look like a success."
)
CELERY_BODY_FIX = (
    "Drop @claimed and make it a claimed task: "
    "@shared_task(base=jobclaims.contrib.celery.ClaimedTask, claim_window=...)"
)

P = ParamSpec("P")
R = TypeVar("R")


def window_key(spec: WindowSpec, explicit: str | None = None) -> str:
    """The key of the window that starts now by the database clock, or of ``explicit``.

    Raises ``ValueError`` naming the fix for an unknown spec or a key that
    does not parse.
    """
    return slot_key(Slots.of_window(spec), explicit)


def slot_key(slots: Slots, explicit: str | None = None) -> str:
    """The key of the slot ``explicit`` (an operator's ``--window``) names, else
    of the one due now by the claims database's clock.

    Raises ``ValueError`` naming the fix for a key that does not parse, or
    a schedule with no fire yet. The clock is read here, not in
    ``jobclaims.slots``, which the claims model imports to record a slot.
    """
    if explicit is not None:
        return slots.key_for(explicit)
    db = jobclaims_settings.claims_database(JobRun)
    # A connection lost to a failover is tried again, as a claim would.
    return slots.current_key(retries.retrying(connections[db], lambda: database_now(db)))


@contextmanager
def claim(
    job: str,
    *,
    window: WindowSpec = "minutely",
    key: str | None = None,
    lease: datetime.timedelta | None = None,
    force: bool = False,
    allow_overlap: bool = False,
    max_run_time: datetime.timedelta | None = None,
    wait: datetime.timedelta | None = None,
) -> Iterator[JobRun]:
    """Run the block as the only holder of ``job``'s current window.

    Raises ``NotClaimed`` before the block runs if another instance holds it
    or it already succeeded::

        try:
            with claim("sync_ledger", window="hourly") as run:
                sync_ledger()
        except NotClaimed:
            pass  # another server is on it

    ``key`` claims an explicit window instead of the current one; ``lease``
    defaults to ``JOBCLAIMS["DEFAULT_LEASE"]``. With ``max_run_time`` the
    lease is not renewed past that long after the claim (see ``holding()``).
    With ``wait``, a claim refused by a run whose lease ends within ``wait``
    waits for that end and tries again, for a runner that retries a run that
    died (see ``claim_waiting()``). A bad window, lease, maximum run time or
    wait raises ``ValueError`` naming the fix, before anything is written.
    """
    if lease is None:
        lease = jobclaims_settings.default_lease
    validate_max_run_time(max_run_time)
    validate_wait(wait)
    slots = Slots.of_window(window)
    key = slot_key(slots, key)
    run = claim_waiting(
        job,
        key,
        wait,
        lease=lease,
        force=force,
        allow_overlap=allow_overlap,
        schedule=slots.recorded_schedule,
    )
    if isinstance(run, Refusal):
        raise NotClaimed(job, key, run)
    with holding(run, lease, max_run_time):
        yield run


def claim_waiting(
    job: str,
    key: str,
    wait: datetime.timedelta | None,
    *,
    lease: datetime.timedelta,
    allow_overlap: bool = False,
    **options: Any,
) -> JobRun | Refusal:
    """Claim the window ``key``, waiting up to ``wait`` for the run in its way to let go.

    A runner that retries (a Kubernetes Job's ``backoffLimit``, a task
    queue's redelivery) may retry a run that died before its lease ran out;
    skipping then would lose the window, since no later instance of it comes.
    The refusal names the lease in the way: while it ends within ``wait`` of
    the first refusal, by the database clock, the claim sleeps until then
    and tries again. A live holder renews its lease, so the wait ends at
    ``wait`` however long it runs. Returns the last refusal when the window
    succeeded, or the wait would outlast ``wait``.
    """
    deadline = None
    while True:
        run = JobRun.objects.try_claim(
            job, key, lease=lease, allow_overlap=allow_overlap, **options
        )
        if not isinstance(run, Refusal):
            return run
        if wait is None:
            return run
        now = database_now(jobclaims_settings.claims_database(JobRun))
        deadline = deadline or now + wait
        pause = run.pause(now, deadline)
        if pause is None:
            return run
        time.sleep(pause.total_seconds())


def claimed(
    job: str | None = None,
    *,
    window: WindowSpec = "minutely",
    lease: datetime.timedelta | None = None,
    allow_overlap: bool = False,
    max_run_time: datetime.timedelta | None = None,
    wait: datetime.timedelta | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Decorate a function so it runs at most once per window.

    When the claim is refused the function is not called and the call
    returns ``None``. ``job`` defaults to the function's dotted name.
    ``wait`` is ``claim()``'s. Under Django's ``@task`` it goes below the
    task decorator, so the task runs the claimed function. For a Celery task
    use ``jobclaims.contrib.celery.ClaimedTask`` instead, which names the job
    after the task and keeps Celery's retries and redeliveries working.
    """

    # Checked as the module that uses it is imported, not at the first call.
    Slots.of_window(window)
    if lease is not None and (problem := leases.problem(lease)):
        raise ValueError(f"lease {problem}")
    validate_wait(wait)
    validate_max_run_time(max_run_time)

    def decorate(function: Callable[P, R]) -> Callable[P, R | None]:
        refuse_a_task(function)
        if "celery" in sys.modules:  # Imported before any task decorator runs.
            watch_celery_starts()
        name = job or f"{function.__module__}.{function.__qualname__}"

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
            refuse_a_celery_body()
            try:
                with claim(
                    name,
                    window=window,
                    lease=lease,
                    allow_overlap=allow_overlap,
                    max_run_time=max_run_time,
                    wait=wait,
                ):
                    return function(*args, **kwargs)
            except NotClaimed as refused:
                # Raised on entering the block only: the function never ran.
                logger.debug("Not calling %s: %s", name, refused)
                return None

        setattr(wrapper, CLAIMED_MARK, True)
        return wrapper

    return decorate


def refuse_a_task(function: object) -> None:
    """Refuse to wrap a task object: its runner would never call the wrapper.

    Above ``@shared_task`` or ``@task``, ``@claimed`` would wrap the task
    object, while the worker runs the task its registry holds, by name:
    unclaimed, on every beat.
    """
    # type(), not isinstance(): a lazy task's proxy would look its task up in
    # whichever app is current, which may not know it.
    kind = type(function)
    celery = sys.modules.get("celery")
    if celery is not None and (issubclass(kind, celery.Task) or kind.__module__ == "celery.local"):
        raise TypeError(
            "@claimed cannot wrap a Celery task: the worker would run the task "
            "unclaimed. Make it a claimed task instead: "
            "@shared_task(base=jobclaims.contrib.celery.ClaimedTask, claim_window=...)"
        )
    if kind.__module__.startswith(("django.tasks", "django_tasks")):
        raise TypeError(
            "@claimed cannot wrap a Django task: the worker would run the task "
            "unclaimed. Put @claimed under @task, so the task runs the claimed function"
        )


def refuse_a_celery_body() -> None:
    """Refuse to run as the body of a Celery task (``@claimed`` under ``@shared_task``).

    Its refusal would return ``None``, which Celery records as SUCCESS, and
    an ``acks_late`` redelivery would be acknowledged without waiting for
    the dead run, leaving its window running. A worker or beat refuses to
    start with such a task (``jobclaims.contrib.celery``), and check
    jobclaims.E007 names it; this is the last guard, for a task run where
    neither looked (``apply()``, eager mode), before anything is written.
    """
    celery = sys.modules.get("celery")
    task = celery.current_task if celery is not None else None
    if task and is_claimed(task_body(task)):  # A proxy: falsy outside tasks.
        raise TypeError(f"{CELERY_BODY_PROBLEM} {CELERY_BODY_FIX}")


def is_claimed(function: object) -> bool:
    """Whether ``function`` is a ``@claimed`` function, or a decorator's wrapper of one."""
    return getattr(function, CLAIMED_MARK, False) is True


def task_body(task: Any) -> object:
    """The function a Celery task runs: its ``run``, unbound if the task is bound."""
    return getattr(task.run, "__func__", task.run)


def misordered_tasks(app: Any) -> list[str]:
    """The names of a Celery app's tasks whose body is a ``@claimed`` function.

    Reading ``app.tasks`` finalizes the app: it builds every task of the
    modules imported so far.
    """
    return sorted(name for name, task in app.tasks.items() if is_claimed(task_body(task)))


def refuse_misordered_tasks(sender: Any, **kwargs: Any) -> None:
    """Stop a Celery worker or beat that would run a task with a ``@claimed`` body.

    Celery creates a task with no hook of its own, so this is the earliest
    point that sees them all: ``worker_init`` comes once the worker has
    imported every task module, before its pool starts or it consumes a
    message; ``beat_init`` before beat sends anything. Celery logs and
    ignores an exception a receiver raises, but not ``SystemExit``, which
    ends the process with status 1 and prints the message.
    """
    if names := misordered_tasks(sender.app):
        raise SystemExit(
            f"Refusing to start: {', '.join(names)}: {CELERY_BODY_PROBLEM} {CELERY_BODY_FIX}"
        )


def watch_celery_starts() -> None:
    """Have every Celery worker and beat of this process ``refuse_misordered_tasks()``.

    Connected by the first ``@claimed`` of a process that imported Celery,
    which a task decorator above it needs; once, whatever the number.
    """
    from celery.signals import beat_init, worker_init

    for signal in (worker_init, beat_init):
        signal.connect(refuse_misordered_tasks, weak=False, dispatch_uid="jobclaims.misordered")


def validate_wait(wait: datetime.timedelta | None) -> None:
    """Refuse a wait that is not a positive timedelta (or ``None``)."""
    if problem := durations.problem(wait, none_means="not to wait"):
        raise ValueError(f"wait {problem}")


def validate_max_run_time(max_run_time: datetime.timedelta | None) -> None:
    """Refuse a maximum run time that is not a positive timedelta (or ``None``)."""
    if problem := durations.problem(max_run_time, none_means="for no limit"):
        raise ValueError(f"max_run_time {problem}")


@contextmanager
def holding(
    run: JobRun,
    lease: datetime.timedelta,
    max_run_time: datetime.timedelta | None = None,
    keep_on: tuple[type[BaseException], ...] = (),
    on_cancel: Callable[[JobCancelled], None] | None = None,
) -> Iterator[JobRun]:
    """Hold ``run``'s claim while the block runs, then record how it ended.

    The lease is renewed in the background, until ``max_run_time`` after the
    claim if one is given: a run that hangs then loses its claim to the next
    instance, as a crashed one does. The claim is recorded succeeded when the
    block returns and failed, with the error, when it raises. If the claim was
    lost meanwhile nothing is recorded over the new holder, and ``ClaimLost``
    is raised. Stop signals are held back while the outcome is recorded (see
    ``jobclaims.stopping``).

    An exception of a type in ``keep_on`` ends the block and leaves the claim
    running, its lease no longer renewed: a task queue's retry, which comes
    back to the window as the same holder (``jobclaims.contrib.celery``).

    ``on_cancel`` is told when the heartbeat finds that an operator
    cancelled the run (``jobclaims.cancels``); without it the run's writes
    are refused from then on, and it goes on until it ends.

    The block starts only on a lease this process knows is still its own
    (``start_held()``); otherwise ``LeaseLapsed`` is raised and nothing ran.
    """
    start_held(run, lease, max_run_time)
    try:
        with Heartbeat(run, lease, max_run_time, on_cancel):
            yield run
    except ClaimLost:
        raise
    except keep_on:
        raise
    except BaseException as error:
        with stops_held_back():
            record_failure(run, error)
        raise
    with stops_held_back():
        try:
            released = run.release(JobRun.Status.SUCCEEDED)
        except DatabaseError as error:
            raise ClaimLost(
                f"{run.job} {run.window} ran, but the database did not take its success "
                f"({retries.summary(error)}) until its lease was gone; the next instance takes "
                "the window over"
            ) from error
    if not released:
        raise ClaimLost(
            f"{run.job} {run.window} was taken over by another instance while "
            "this one ran (its lease ended: it stopped renewing it, paused, was "
            "cut off, expired by an operator or ran past its max run time), so "
            "its success was not recorded"
        )


def start_held(
    run: JobRun, lease: datetime.timedelta, max_run_time: datetime.timedelta | None = None
) -> None:
    """Let the run start only while it knows one renewal interval of its lease is left.

    A claim whose commit stalled (a cluster's node fault, a synchronous
    standby, a lock, a paused process) can return after the lease it took
    has ended, when another instance may already have taken the window
    over. The run knows how much is left from before its claim was sent
    (``JobRun.held_until``). With a renewal interval left, the heartbeat's
    first renewal has that long to land; with less, the run renews once, by
    compare-and-set on its token, and starts only if that renewal returns
    with a renewal interval left. Else ``LeaseLapsed``: the run steps aside
    and writes nothing more; its lease ends on its own, if it has not.
    """
    margin = leases.renewal_interval(lease)
    known = run.held_for()
    if known >= margin:
        return
    try:
        renewed = run.renew(lease, until=lease_deadline(run, max_run_time))
    except DatabaseError as error:
        why = f"and its renewal failed ({retries.summary(error)})"
    else:
        if renewed and run.held_for() >= margin:
            return
        why = "and its renewal returned late too" if renewed else "and its lease had ended"
    lapsed = LeaseLapsed(
        run.job,
        run.window,
        f"its claim returned with {known:.1f} s of its lease known to be left, less "
        f"than one renewal interval ({margin:.1f} s), {why}, so another instance may "
        "hold it; nothing ran",
    )
    logger.info("%s", lapsed, extra={"job": run.job, "window": run.window, "owner": run.owner})
    raise lapsed


def record_failure(run: JobRun, error: BaseException) -> None:
    """Record the run failed with ``error``, so the next instance retries it at once.

    The error's one-line summary comes first, then the traceback. A run
    stopped at its timeout is recorded timed out, a failure of its own name.
    """
    db = run._state.db
    assert db is not None, "a claimed run was saved, so it has a database"
    connection = connections[db]
    if not connection.in_atomic_block:
        # The job may have failed because the connection died: reconnect.
        connection.close_if_unusable_or_obsolete()
    summary = "".join(traceback.format_exception_only(error)).strip()
    try:
        status = JobRun.Status.TIMED_OUT if isinstance(error, JobTimedOut) else JobRun.Status.FAILED
        run.release(status, error=f"{summary}\n\n{traceback.format_exc()}")
    except DatabaseError as db_error:
        logger.error(
            "Could not record the failure of %s (%s); the next run takes the "
            "window over when the lease ends",
            run,
            db_error,
            extra={"job": run.job, "window": run.window, "owner": run.owner},
        )
