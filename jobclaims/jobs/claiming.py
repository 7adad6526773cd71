"""Claims for code that is not a management command: tasks and functions.

``claim()`` and ``@claimed`` give a Celery task, a Django task or a plain
function what ``JobCommand`` gives a command: one run per window, a lease
renewed while the code runs, and the outcome recorded on the claim.
"""

from __future__ import annotations

import contextvars
import datetime
import functools
import importlib
import logging
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar, cast

from django.db import DatabaseError, connections

from jobclaims.claims import retries
from jobclaims.claims.rule import Refusal
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import ClaimFailed, NotClaimed
from jobclaims.jobs import task_schedules
from jobclaims.models import JobRun
from jobclaims.running import queued
from jobclaims.running.holding import holding
from jobclaims.time import durations, leases
from jobclaims.time.clock import carried_database_now, database_now, read_database_now
from jobclaims.time.slots import Slots
from jobclaims.time.windows import WindowSpec

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

    :param spec: A window, as :func:`claim` takes it.
    :param explicit: A date or date-time (an operator's ``--window``) whose
        window's key to give instead, normalised: ``2026-11-29T10:25`` is
        the ``2026-11-29T10:00+00:00`` window of ``"hourly"``.
    """
    return slot_key(Slots.of_window(spec), explicit)


def slot_key(slots: Slots, explicit: str | None = None) -> str:
    """The key of the slot ``explicit`` (an operator's ``--window``) names, else
    of the one due now by the claims database's clock.

    Raises ``ValueError`` naming the fix for a key that does not parse, or
    a schedule with no fire yet. The clock is read here, not in
    ``jobclaims.time.slots``, which the claims model imports to record a slot,
    and only where its last reading, carried forward, cannot tell which slot
    is due (``carried_database_now()``): near a slot's edge, or once a
    minute. A worker claiming task after task saves the round trip.
    """
    if explicit is not None:
        return slots.key_for(explicit)
    db = jobclaims_settings.claims_database(JobRun)
    if (bounds := carried_database_now(db)) is not None:
        # Away from the slot's edges, the last reading of the clock settles it.
        keys = {slots.current_key(moment) for moment in bounds}
        if len(keys) == 1:
            return keys.pop()
    # A connection lost to a failover is tried again, as a claim would.
    return slots.current_key(retries.retrying(connections[db], lambda: read_database_now(db)))


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

    A bad window, lease, maximum run time or wait raises ``ValueError``
    naming the fix, before anything is written.

    :param job: The name the claims are recorded under.
    :param window: The slot a run belongs to: ``"minutely"``, ``"hourly"``,
        ``"daily"``, ``"weekly"``, ``"monthly"`` (in ``TIME_ZONE``), or a
        ``timedelta`` for fixed buckets.
    :param key: An explicit window's key (a rerun, a backfill, a key computed
        when a task was enqueued) instead of the current window's.
    :param lease: How long the claim lasts unrenewed; renewed while the block
        runs. ``None``: ``JOBCLAIMS["DEFAULT_LEASE"]``.
    :param force: Claim a window that already succeeded, to run it again.
    :param allow_overlap: Let the claim in while a run of another window of
        ``job`` still holds it.
    :param max_run_time: Stop renewing the lease this long after the claim, so
        that a block that hangs loses its window to the next instance.
    :param wait: If a run whose lease ends within this long holds the window,
        wait for that end and take the window over if its holder died,
        instead of raising ``NotClaimed``: for a runner that retries a run
        that died (a Kubernetes Job's ``backoffLimit``, a task queue).
    :returns: The claim, held while the block runs and released as succeeded,
        or failed if the block raised.
    """
    if lease is None:
        lease = jobclaims_settings.default_lease
    validate_max_run_time(max_run_time)
    validate_wait(wait)
    slots = Slots.of_window(window)
    with failing_cleanly(job, key) as claiming:
        key = claiming.key = slot_key(slots, key)
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


class _Claiming:
    """What a claim under way claims, for the message of its failure."""

    def __init__(self, key: str | None):
        self.key = key


@contextmanager
def failing_cleanly(job: str, key: str | None = None) -> Iterator[_Claiming]:
    """Turn a database error of a claim under way into ``ClaimFailed``.

    A database that cannot be reached, or kept asking for the claim to be
    tried again until ``retries.RETRY_FOR`` ran out, ends the claim before
    anything ran: the caller gets one line that says so, naming what the
    database answered, not the driver's traceback (set the claim's ``key``
    on what this yields once it is known).
    """
    claiming = _Claiming(key)
    try:
        yield claiming
    except ClaimFailed:
        raise
    except DatabaseError as error:
        raise ClaimFailed(claim_failure(job, claiming.key, error)) from error


def claim_failure(job: str, key: str | None, error: DatabaseError) -> str:
    """The one line that says a claim of ``job`` failed with ``error`` and nothing ran."""
    if retries.is_transient(error):
        answer = f"kept answering {retries.summary(error)} for {retries.RETRY_FOR:.0f} s"
    else:
        answer = f"answered {retries.summary(error)}"
    return (
        f"Could not claim {job} {key or ''}".rstrip()
        + f": the database {answer}, so nothing ran; the next run tries again"
    )


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
    returns ``None``. Under Django's ``@task`` it goes below the task
    decorator, so the task runs the claimed function; there a refused call
    raises ``NotClaimed`` instead, so that the task's result says it did not
    run (FAILED, with ``NotClaimed`` as its exception class) rather than
    SUCCESSFUL with ``None``. For a Celery task use
    ``jobclaims.contrib.celery.ClaimedTask`` instead, which names the job
    after the task and keeps Celery's retries and redeliveries working. A bad
    window, lease, maximum run time or wait raises ``ValueError`` naming the
    fix when the function is decorated; a database that cannot be reached
    raises ``ClaimFailed``.

    :param job: The name the claims are recorded under; ``None``: the
        function's dotted name.
    :param window: As :func:`claim`'s.
    :param lease: As :func:`claim`'s.
    :param allow_overlap: As :func:`claim`'s.
    :param max_run_time: As :func:`claim`'s.
    :param wait: As :func:`claim`'s: a call refused by a run whose lease ends
        within it waits, and runs if that run's holder died.
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
        watch_django_tasks()
        name = job or f"{function.__module__}.{function.__qualname__}"

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
            refuse_a_celery_body()
            if (fire := kwargs.pop(queued.FIRE_KWARG, None)) is not None:
                return _run_fire(
                    queued.QueuedFire.from_json(cast("dict[str, Any]", fire)),
                    max_run_time,
                    function,
                    args,
                    kwargs,
                )
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
                if runs_as_django_task(wrapper):
                    raise
                return None

        setattr(wrapper, CLAIMED_MARK, True)
        claims = {"job": name, "lease": lease, "allow_overlap": allow_overlap}
        setattr(wrapper, task_schedules.CLAIMED_OPTIONS, claims)
        return wrapper

    return decorate


def _run_fire(
    fire: queued.QueuedFire,
    max_run_time: datetime.timedelta | None,
    function: Callable[..., R],
    args: Any,
    kwargs: Any,
) -> R | None:
    """Run a scheduled fire's task under the claim its message carries
    (``jobclaims.running.queued``), or step aside if that claim no longer holds."""
    run = queued.adopt(fire)
    if run is None:
        logger.info("%s", queued.stepped_aside(fire))
        return None
    with queued.running(fire, run, max_run_time):
        return _call_holding(run, function, args, kwargs)


#: The claim the ``@claimed`` function running in this context holds.
_holding: ContextVar[JobRun | None] = ContextVar("jobclaims_claimed_run", default=None)


def claimed_run() -> JobRun:
    """The claim the running ``@claimed`` function holds: its job, window and
    attempt, and ``ensure_held()`` and ``fenced()`` for long work.

    Raises ``LookupError`` outside a ``@claimed`` function's call.
    """
    run = _holding.get()
    if run is None:
        raise LookupError("claimed_run() is asked outside a @claimed function's call")
    return run


def _call_holding(run: JobRun, function: Callable[..., R], args: Any, kwargs: Any) -> R:
    token = _holding.set(run)
    try:
        return function(*args, **kwargs)
    finally:
        _holding.reset(token)


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
    """Whether ``function`` is a ``@claimed`` function, or a decorator's wrapper of one.

    A wrapper made with ``functools.wraps`` carries the mark; one made
    without it is seen through what it wraps (``wrapped_functions()``).
    """
    return any(getattr(each, CLAIMED_MARK, False) is True for each in wrapped_functions(function))


#: How many decorators deep ``wrapped_functions()`` looks.
_DEEPEST_WRAPPER = 8


def wrapped_functions(function: object) -> Iterator[object]:
    """``function`` and every function it wraps, decorators' wrappers seen through.

    A decorator's wrapper keeps what it wraps in ``__wrapped__``
    (``functools.wraps``), in its closure (a plain ``def inner(*args)``),
    or as a partial's ``func``. A function that merely calls another by
    its global name wraps nothing: a task that calls a ``@claimed`` helper
    is not a claimed body.
    """
    seen: set[int] = set()
    layer = [function]
    for _ in range(_DEEPEST_WRAPPER):
        below = []
        for each in layer:
            if id(each) in seen:
                continue
            seen.add(id(each))
            yield each
            if (wrapped := getattr(each, "__wrapped__", None)) is not None:
                below.append(wrapped)
            if isinstance(each, functools.partial):
                below.append(each.func)
            if isinstance(each, types.MethodType):
                below.append(each.__func__)
            if isinstance(each, types.FunctionType):
                cells = each.__closure__ or ()
                below += [cell.cell_contents for cell in cells if _holds_a_function(cell)]
        layer = below
        if not layer:
            return


def _holds_a_function(cell: types.CellType) -> bool:
    try:
        contents = cell.cell_contents
    except ValueError:  # A cell not filled yet.
        return False
    return isinstance(contents, (types.FunctionType, types.MethodType, functools.partial))


#: The function of the Django task this context runs, from its backend's
#: ``task_started`` to its ``task_finished``.
_django_task_function: contextvars.ContextVar[object] = contextvars.ContextVar(
    "jobclaims_django_task_function", default=None
)

#: The modules whose signals say when a Django task runs: Django's own
#: (6.0+), and the ``django-tasks`` backport's.
_DJANGO_TASK_SIGNALS = ("django.tasks.signals", "django_tasks.signals")


def watch_django_tasks() -> None:
    """Learn, from the task backends' signals, which Django task is running.

    Connected by the first ``@claimed`` of a process that imported Django's
    tasks (or the backport), which a ``@task`` above it needs; once.
    """
    for module_name in _DJANGO_TASK_SIGNALS:
        if module_name.rpartition(".")[0] not in sys.modules:
            continue
        signals = importlib.import_module(module_name)
        uid = f"jobclaims.task_runs.{module_name}"
        signals.task_started.connect(_task_started, weak=False, dispatch_uid=uid)
        signals.task_finished.connect(_task_finished, weak=False, dispatch_uid=uid)


def _task_started(sender: object, task_result: Any, **kwargs: Any) -> None:
    _django_task_function.set(task_result.task.func)


def _task_finished(sender: object, task_result: Any, **kwargs: Any) -> None:
    _django_task_function.set(None)


def runs_as_django_task(claimed_function: object) -> bool:
    """Whether ``claimed_function`` is, or is wrapped by, the body of the
    Django task that runs now: then its refusal must not return ``None``,
    which the task's backend would record as a success."""
    body = _django_task_function.get()
    return body is not None and any(each is claimed_function for each in wrapped_functions(body))


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
