"""Celery tasks that run once per window, however many beats send them.

Make a task claimed by giving it this base class; the claim's settings are
task options, so there is no decorator to put in the wrong order::

    from celery import shared_task
    from jobclaims.contrib.celery import ClaimedTask

    @shared_task(
        base=ClaimedTask,
        claim_window="hourly",
        acks_late=True,
        reject_on_worker_lost=True,
    )
    def sync_ledger(): ...

The job is the task's registered name, so renaming or moving the function
keeps its claims as long as the name stays. What the result backend shows:

- the task ran: SUCCESS or FAILURE, as without claims;
- the claim was refused: IGNORED, with ``job``, ``window``, ``reason`` and
  ``held_until`` as its meta, never a SUCCESS with a ``None`` result; run
  eagerly or by ``apply()``, IGNORED with a ``ClaimRefused`` as its result;
  in a chord's header the refusal's meta takes the member's place in the
  callback's arguments, so the callback still runs;
- the message is a redelivery of one whose first delivery holds the window
  (a worker SIGKILLed under ``acks_late``, or Redis's visibility timeout):
  no state of its own; it comes back until that run's lease ends and takes
  the window over if the run died, even once the window has ended;
- the window is held by another message's run whose lease ends within
  ``claim_wait`` (default: no wait): RETRY, and the task comes back for the
  same window when that lease ends;
- the task called ``self.retry()``: RETRY, and the claim stays this task's:
  the retry comes back to the same window as the same holder, its lease
  kept long enough, and ``attempt`` does not count Celery's retries. The
  first copy of the retry's message to start takes the claim up under a
  new token; any other copy of it (Redis hands an unacknowledged message
  out again after its visibility timeout) then finds the claim held by
  that copy and stays quiet, as a redelivery does;
- an operator cancelled the run (``jobclaims_cancel``): its heartbeat
  stops the body with ``JobCancelled`` at its next Python instruction (a
  body blocked in one call hears it when the call returns), the window
  stays closed until then, and the call ends REVOKED; a redelivery or a
  retry of its message does not run it again;
- Celery's hard time limit stopped it: recorded timed out, saying so;
- the database could not be reached before the claim: FAILURE with
  ``jobclaims.ClaimFailed``, which the worker logs as one expected line.

Coming back for a holder is not a Celery retry: it leaves
``self.request.retries`` as it was, so ``max_retries`` counts only the
task's own ``self.retry()`` calls.

A refused call ends a chain: the links after it are the work of a copy
that did not run, so they do not run either, and each is recorded IGNORED
with the refusal's meta, so the chain's result says why, not PENDING.

``@claimed`` under ``@shared_task`` (or ``@app.task``), directly or under
another decorator, would make a task whose refusals look like successes:
a worker or beat with such a task
refuses to start, naming it and the fix
(``jobclaims.jobs.claiming.refuse_misordered_tasks()``), and check
jobclaims.E007 names it to ``manage.py check``.
"""

from __future__ import annotations

import ctypes
import datetime
import difflib
import hashlib
import signal
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, NoReturn

from celery import Celery, Task, states
from celery.exceptions import Ignore, Retry
from django.db import DatabaseError
from django.utils.dateparse import parse_datetime

from jobclaims.claims import engine
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import (
    ClaimFailed,
    ClaimLost,
    JobCancelled,
    JobInterrupted,
    JobTimedOut,
    LeaseLapsed,
)
from jobclaims.jobs.claiming import (
    failing_cleanly,
    misordered_tasks,
    slot_key,
    validate_max_run_time,
    validate_wait,
)
from jobclaims.models import JobRun
from jobclaims.running import queued
from jobclaims.running.cancels import cancellation
from jobclaims.running.holding import holding, let_go_if_cancelled
from jobclaims.running.queued import TOKEN_HEADER, WINDOW_HEADER, QueuedFire
from jobclaims.time import leases
from jobclaims.time.clock import database_now
from jobclaims.time.slots import Slots
from jobclaims.time.windows import WindowSpec

#: Message headers a retry carries back: the window it is for and the token
#: of the claim it holds (``WINDOW_HEADER``, ``TOKEN_HEADER``, which a
#: scheduled fire's message carries too, with ``FIRE_HEADER``: see
#: ``jobclaims.running.queued``), and until when (database clock) it waits
#: for a holder.
WAIT_HEADER = "jobclaims_wait_until"


class ClaimedTask(Task):
    """A task that runs at most once per window of ``claim_window``.

    Before the task's body runs it claims the current window under the
    task's name, holds it while the body runs, renewing the lease, and
    records how it ended. See this module's docstring for what a refusal
    and a retry look like.
    """

    #: How the task's windows are cut: "hourly", "daily", a timedelta, ...
    claim_window: WindowSpec = "minutely"
    #: The claim's lease; ``None`` for ``JOBCLAIMS["DEFAULT_LEASE"]``.
    claim_lease: datetime.timedelta | None = None
    #: Stop renewing the lease this long after the claim; ``None``: never.
    claim_max_run_time: datetime.timedelta | None = None
    #: Let a run of this window start while a run of another still holds the job.
    claim_allow_overlap: bool = False
    #: How long after the first refusal a call keeps coming back to a window
    #: that another message's run holds; ``None``: it is IGNORED at once, as
    #: the copy a second beat sends should be. A redelivery of the holder's
    #: own message always waits for that run's lease.
    claim_wait: datetime.timedelta | None = None
    #: Marks the task as a job that exists, for ``jobclaims.jobs.discovery``
    #: (its ``CLAIMED_TASK_MARK``), which knows jobs without importing Celery.
    jobclaims_claimed_task = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse bad claim options as the task is defined, naming the fix."""
        super().__init_subclass__(**kwargs)
        _refuse_bad_options(cls)

    @classmethod
    def on_bound(cls, app: Celery) -> None:
        """Refuse bad claim options again once the app bound the task.

        The app sets the options ``task_annotations`` give as it binds the
        task, after the class was made. ``ClaimFailed`` is made one of the
        task's expected errors (``throws``): the worker logs it as one line.
        """
        super().on_bound(app)
        _refuse_bad_options(cls)
        if not issubclass(ClaimFailed, tuple(cls.throws)):
            cls.throws = (*cls.throws, ClaimFailed)

    @property
    def claimed_run(self) -> JobRun:
        """The claim the running call holds: its window, attempt and owner.

        For a bound task's body (``bind=True``), as ``self.claimed_run``;
        ``ensure_held()`` and ``fenced()`` are there for long work.
        """
        run: JobRun = self.request.jobclaims_run
        return run

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        lease = self.claim_lease or jobclaims_settings.default_lease
        # Celery looks its request up on each read: read once per call.
        request = self.request
        headers = request.headers or {}
        if (fire := QueuedFire.from_headers(headers)) is not None:
            return self._run_fire(fire, started, args, kwargs)
        slots = Slots.of_window(self.claim_window)
        # Until the body starts, a database error is a claim that failed.
        with failing_cleanly(self.name, headers.get(WINDOW_HEADER)) as claiming:
            key = headers.get(WINDOW_HEADER) or self._first_delivery_key() or slot_key(slots)
            request.jobclaims_window = claiming.key = key
            run: JobRun | Refusal | None = self._resumed(key, headers.get(TOKEN_HEADER), lease)
            if run is None:
                run = JobRun.objects.try_claim(
                    self.name,
                    key,
                    lease=lease,
                    allow_overlap=self.claim_allow_overlap,
                    schedule=slots.recorded_schedule,
                    owner=self._holder(),
                )
            if isinstance(run, Refusal):
                return self._refused(run, lease, headers.get(WAIT_HEADER))
        request.jobclaims_run = run
        held = run

        def hold(stop: _BodyStop) -> AbstractContextManager[JobRun]:
            return holding(held, lease, self.claim_max_run_time, keep_on=(Retry,), on_cancel=stop)

        try:
            return self._run_body(held, lease, started, hold, args, kwargs)
        except LeaseLapsed as lapsed:
            # The claim came back too late to start on: as refused by a row
            # it did not see, try again at once (its lease may be free now).
            # Or the job was paused since the claim: as refused by the pause.
            refusal = lapsed.refusal or Refusal(self.name, key, Reason.HELD)
            return self._refused(refusal, lease, headers.get(WAIT_HEADER))

    def _run_fire(
        self, fire: QueuedFire, started: float, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run a scheduled fire under the claim its message carries, adopted
        (``jobclaims.running.queued``); a copy whose claim no longer holds
        steps aside, acknowledged with no state of its own."""
        with failing_cleanly(self.name, fire.window):
            run = queued.adopt(fire, owner=self._holder())
        if run is None:
            raise Ignore(queued.stepped_aside(fire))
        self.request.jobclaims_window = fire.window
        self.request.jobclaims_run = run

        def hold(stop: _BodyStop) -> AbstractContextManager[JobRun]:
            return queued.running(
                fire, run, self.claim_max_run_time, keep_on=(Retry,), on_cancel=stop
            )

        try:
            return self._run_body(run, fire.lease, started, hold, args, kwargs)
        except LeaseLapsed as lapsed:
            raise Ignore(str(lapsed)) from lapsed

    def _run_body(
        self,
        run: JobRun,
        lease: datetime.timedelta,
        started: float,
        hold: Callable[[_BodyStop], AbstractContextManager[JobRun]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Run the task's body under ``run``'s claim (``hold``), and end the
        call as the claim ended: a retry kept for the same window, a cancel
        REVOKED, a worker's stop or time limit recorded as it meant it."""
        stop = _BodyStop()
        try:
            with hold(stop):
                try:
                    return super().__call__(*args, **kwargs)
                except SystemExit as exit_:
                    if (stopped := self._stopped_by_worker(exit_, started)) is None:
                        raise
                    raise stopped from exit_
                finally:
                    stop.disarm()
        except Retry as retry:
            if not _keep_for_retry(run, retry, lease):
                let_go_if_cancelled(run)  # Its retry finds it cancelled, and stops.
            raise
        except JobCancelled as cancelled:
            self._cancelled(cancelled)
        except ClaimLost:
            if (cancel := _cancellation_if_readable(run)) is not None:
                self._cancelled(cancel)
            raise
        except (JobTimedOut, JobInterrupted) as stopped:
            # Recorded; the worker's own exit goes on, as the worker meant it.
            if isinstance(stopped.__cause__, SystemExit):
                raise stopped.__cause__ from None
            raise

    def _stopped_by_worker(
        self, exit_: SystemExit, started: float
    ) -> JobTimedOut | JobInterrupted | None:
        """What the worker meant by the ``SystemExit`` its pool process raised, if it did.

        A prefork pool process that receives SIGTERM exits with status
        ``-(256 - SIGTERM)``: its worker terminates it at Celery's hard time
        limit, or for ``revoke(terminate=True)``. The first is recorded as a
        timeout, the other as an interruption, each saying so; anything
        else is the body's own ``SystemExit``, a failure.
        """
        if exit_.code != _TERMINATED:
            return None
        limit = self._hard_time_limit()
        took = time.monotonic() - started
        if limit is not None and took >= limit - max(1.0, limit / 10):
            return CeleryTimeLimit(limit)
        return JobInterrupted(signal.SIGTERM)

    def _hard_time_limit(self) -> float | None:
        """The call's hard time limit, in seconds: its own, the task's or the app's."""
        request_limits = getattr(self.request, "timelimit", None) or (None, None)
        limit = request_limits[0] or self.time_limit or self.app.conf.task_time_limit
        return float(limit) if limit else None

    def _cancelled(self, cancelled: JobCancelled) -> NoReturn:
        """End the call of a run an operator cancelled: REVOKED, saying by whom.

        An ``Ignore``, so the worker acknowledges the message: a cancelled
        run is not retried, however ``acks_late`` and retries are set.
        """
        request = self.request
        if not request.is_eager and request.id and not request.called_directly:
            self.backend.mark_as_revoked(request.id, str(cancelled), request=request)
        raise Ignore(f"{self.name} {request.jobclaims_window} was {cancelled}")

    def retry(self, *args: Any, **options: Any) -> Any:
        """Retry for the same window, as its holder if this call holds it."""
        headers = {**(self.request.headers or {}), **options.pop("headers", {})}
        headers.pop(WAIT_HEADER, None)  # A wait ended; the next refusal starts its own.
        key = getattr(self.request, "jobclaims_window", None)
        if key is not None:
            headers[WINDOW_HEADER] = key
        run = getattr(self.request, "jobclaims_run", None)
        if run is not None:
            headers[TOKEN_HEADER] = str(run.token)
        return super().retry(*args, headers=headers, **options)

    def _holder(self) -> str | None:
        """The claim's owner: this process, and the task's id if it has one."""
        task_id = self.request.id
        return f"{engine.process_owner()}{_task_mark(task_id)}" if task_id else None

    def _first_delivery_key(self) -> str | None:
        """The key of the window a redelivered message's first delivery claimed, or ``None``.

        Celery redelivers an ``acks_late`` message whose worker died, maybe
        after its window ended; it must finish that window, not claim the
        one it arrives in and leave the dead run's window unfinished. The
        claim's owner ends with the task's id, which a redelivery keeps.
        Asked only of a redelivery: a first delivery costs no statement more.
        A first delivery an operator cancelled is not run again.
        """
        if not (self.request.delivery_info or {}).get("redelivered"):
            return None
        first_delivery = (
            JobRun.objects.filter(status__in=[JobRun.Status.RUNNING, JobRun.Status.CANCELLED])
            .filter(job=self.name, owner__endswith=_task_mark(self.request.id))
            .first()
        )
        if first_delivery is None:
            return None
        self._unless_cancelled(first_delivery)
        return first_delivery.window

    def _resumed(self, key: str, token: str | None, lease: datetime.timedelta) -> JobRun | None:
        """The claim a retried call still holds, taken up under a new token; or ``None``.

        Every copy of the retry's message carries the same token, and the
        first to take the claim up changes it (``JobRun.resume()``): any
        other copy then finds the claim another's, as a redelivery does,
        and waits quietly for that copy's lease. A retry of a run an
        operator cancelled is not run.
        """
        if token is None:
            return None
        run = JobRun.objects.filter(job=self.name, window=key, token=token).first()
        if run is None:
            return None  # Another copy took it up, or it was taken over.
        self._unless_cancelled(run)
        if run.status != JobRun.Status.RUNNING or not run.resume(lease, owner=self._owner()):
            return None  # Lost meanwhile: claim the window like any other call.
        return run

    def _unless_cancelled(self, run: JobRun) -> None:
        """End the call if an operator cancelled ``run``, the claim it comes back to."""
        if run.status == JobRun.Status.CANCELLED:
            self._cancelled(JobCancelled(run.cancelled_by, run.cancelled_at))

    def _owner(self) -> str:
        return self._holder() or engine.process_owner()

    def _refused(self, refusal: Refusal, lease: datetime.timedelta, wait_until: str | None) -> None:
        """Come back when the lease in the way ends, or tell the caller why not.

        A redelivery of the holder's own message stays quiet: the state the
        caller reads is its first delivery's, or its own once it takes over.
        """
        request = self.request
        if request.called_directly:
            return None  # Called as a function: the caller gets None, as from @claimed.
        own = bool(refusal.owner and request.id and refusal.owner.endswith(_task_mark(request.id)))
        wait = lease if own else self.claim_wait
        if wait is not None and not request.is_eager:
            now = database_now(jobclaims_settings.claims_database(JobRun))
            deadline = parse_datetime(wait_until) if wait_until else None
            if deadline is None:
                deadline = now + wait
            if (pause := refusal.pause(now, deadline)) is not None:
                self._come_back(pause, deadline, quiet=own)
        if own:
            raise Ignore(f"redelivered while its first delivery holds the window: {refusal}")
        refused = ClaimRefused(str(refusal), _meta(refusal))
        if not request.is_eager:
            self._record(refused.meta)
        raise refused

    def _come_back(
        self, pause: datetime.timedelta, deadline: datetime.datetime, quiet: bool
    ) -> None:
        """Send this call again after ``pause``, its ``retries`` unchanged.

        Not ``self.retry()``: waiting for a holder must not spend the task's
        ``max_retries``, which are its own body's to use.
        """
        request = self.request
        again = self.signature_from_request(
            request,
            countdown=pause.total_seconds(),
            retries=request.retries,
            headers={
                **(request.headers or {}),
                WINDOW_HEADER: request.jobclaims_window,
                WAIT_HEADER: deadline.isoformat(),
            },
        )
        again.apply_async()
        if quiet:
            raise Ignore("waiting for its first delivery's lease")
        raise Retry("waiting for the window's holder", when=pause.total_seconds(), sig=again)

    def _record(self, meta: dict[str, str | None]) -> None:
        """Store the refusal as IGNORED, and count it as a chord's part.

        A chord waits for every member of its header; a refused member adds
        its meta where its result would go, so the callback runs. A chain
        stops at a refused link: the links after it are stored IGNORED too.
        """
        request = self.request
        if not (self.ignore_result or request.ignore_result):
            self.update_state(state=states.IGNORED, meta=meta)
        if request.chord:
            self.backend.on_chord_part_return(request, states.IGNORED, meta)
        # The links after it never run: the chain's result is its last link's.
        for link in request.chain or ():
            if link_id := (link.get("options") or {}).get("task_id"):
                self.backend.store_result(link_id, meta, states.IGNORED)


class ClaimRefused(Ignore):
    """A claimed task's call that did not run: the window is done or held.

    An ``Ignore``, so the worker acknowledges the message and records
    nothing more; ``meta`` is what the result backend stores with IGNORED.
    """

    def __init__(self, message: str, meta: dict[str, str | None]):
        super().__init__(message)
        self.meta = meta

    def __reduce__(self) -> tuple[type[ClaimRefused], tuple[str, dict[str, str | None]]]:
        """Pickled whole: a pool child sends it to the worker that ran it."""
        return ClaimRefused, (str(self), self.meta)


def _meta(refusal: Refusal) -> dict[str, str | None]:
    """A refusal as the result backend stores it: JSON, readable by any client."""
    held_until = refusal.expires_at if refusal.reason != Reason.SUCCEEDED else None
    return {
        "job": refusal.job,
        "window": refusal.window,
        "reason": refusal.reason.value,
        "held_until": held_until.isoformat() if held_until is not None else None,
    }


def _keep_for_retry(run: JobRun, retry: Retry, lease: datetime.timedelta) -> bool:
    """Extend the lease past the retry's start, so no other call takes the window;
    ``False`` if the run no longer holds it (an operator cancelled it).

    Should the worker die before the retry runs, the lease still ends, a
    lease after the retry was due, and the next call takes the window over.
    """
    when = retry.when
    if isinstance(when, datetime.datetime):
        now = datetime.datetime.now(tz=when.tzinfo or datetime.timezone.utc)
        delay = max(when - now, datetime.timedelta())
    else:
        delay = datetime.timedelta(seconds=float(when or 0))
    return run.renew(min(lease + delay, leases.MAX_LEASE))


#: A task id this long or longer is recorded by its hash: the owner column
#: holds the host, process and task id in 255 characters.
_LONGEST_TASK_ID = 64


def _task_mark(task_id: str) -> str:
    """How a claim's owner names the task id: as is, or hashed when long."""
    if len(task_id) >= _LONGEST_TASK_ID:
        task_id = "sha256:" + hashlib.sha256(task_id.encode()).hexdigest()[:40]
    return f" task {task_id}"


#: The exit status a prefork pool process raises on SIGTERM (billiard).
_TERMINATED = -(256 - signal.SIGTERM)


class CeleryTimeLimit(JobTimedOut):
    """Celery's hard time limit ended the call: its worker terminated the process.

    A ``JobTimedOut``, so the run is recorded timed out, with this message
    rather than the ``SystemExit`` the pool process raised.
    """

    def __init__(self, limit: float):
        super().__init__(datetime.timedelta(seconds=limit))
        self.args = (
            f"Celery's hard time limit of {limit:g} s passed: the worker terminated "
            "the task's process (SIGTERM) before its body returned",
        )


def _cancellation_if_readable(run: JobRun) -> JobCancelled | None:
    """Who cancelled a run whose claim was lost, if the database can say."""
    try:
        return cancellation(run)
    except DatabaseError:
        return None


class _BodyStop:
    """Stops a task's body when its heartbeat learns the run was cancelled.

    A pool process's SIGTERM belongs to its worker (a time limit, a
    terminating revoke), so the body is not stopped by a signal, as a
    ``JobCommand`` is: ``JobCancelled`` is raised in the body's thread, at
    its next Python instruction. Disarmed as the body ends, so it is raised
    in the body or not at all.
    """

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self._lock = threading.Lock()
        self._armed = True
        self._sent = False

    def __call__(self, cancelled: JobCancelled) -> None:
        """Raise ``cancelled`` in the body; called from the heartbeat's thread."""

        class Cancelled(JobCancelled):
            # Raised by the interpreter, which calls the class without arguments.
            def __init__(self) -> None:
                super().__init__(cancelled.by, cancelled.at)

        Cancelled.__name__ = Cancelled.__qualname__ = "JobCancelled"
        with self._lock:
            if not self._armed:
                return
            self._armed, self._sent = False, True
            _set_async_exc(self.thread, Cancelled)

    def disarm(self) -> None:
        """The body ended: a cancel not raised yet is dropped (its outcome is refused anyway)."""
        with self._lock:
            self._armed = False
            if self._sent:
                _set_async_exc(self.thread, None)


def _set_async_exc(thread: int, error: type[BaseException] | None) -> None:
    """Have ``thread`` raise ``error`` at its next instruction (``None``: not any more)."""
    exc = ctypes.py_object(error) if error is not None else ctypes.py_object()
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), exc)


def _refuse_bad_options(task_class: type[ClaimedTask]) -> None:
    """Refuse claim options a claimed task could not run with, naming the
    task (once it has a name) and the fix."""
    try:
        _refuse_unknown_options(task_class)
        Slots.of_window(task_class.claim_window)
        lease = task_class.claim_lease
        if lease is not None and (problem := leases.problem(lease)):
            raise ValueError(f"claim_lease {problem}")
        validate_max_run_time(task_class.claim_max_run_time)
        validate_wait(task_class.claim_wait)
        overlap = task_class.claim_allow_overlap
        if not isinstance(overlap, bool):
            raise ValueError(f"claim_allow_overlap must be True or False, not {overlap!r}")
    except ValueError as error:
        if name := vars(task_class).get("name"):
            raise ValueError(f"task {name}: {error}") from None
        raise


def _refuse_unknown_options(task_class: type) -> None:
    """A misspelt claim option would be ignored, and the task claim minute windows."""
    known = {name for name in vars(ClaimedTask) if name.startswith("claim_")}
    for name in vars(task_class):
        if name.startswith("claim_") and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            options = ", ".join(sorted(known))
            fix = f"did you mean {close[0]}?" if close else f"the options are {options}"
            raise ValueError(f"{name} is not a ClaimedTask option: {fix}")


def misordered_shared_tasks() -> list[str]:
    """The shared tasks imported so far whose body is a ``@claimed`` function (check E007).

    They are built on an app of the check's own, as Celery builds them on
    every app: finalizing the project's app here would fix its settings of
    the moment into its tasks before the project may have set them all.
    """
    with Celery("jobclaims.checks", fixups=[], set_as_current=False) as app:
        return misordered_tasks(app)
