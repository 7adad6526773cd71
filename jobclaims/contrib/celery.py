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
  kept long enough, and ``attempt`` does not count Celery's retries.

Coming back for a holder is not a Celery retry: it leaves
``self.request.retries`` as it was, so ``max_retries`` counts only the
task's own ``self.retry()`` calls.

``@claimed`` under ``@shared_task`` (or ``@app.task``) would make a task
whose refusals look like successes: a worker or beat with such a task
refuses to start, naming it and the fix
(``jobclaims.claiming.refuse_misordered_tasks()``), and check
jobclaims.E007 names it to ``manage.py check``.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
from typing import Any

from celery import Celery, Task, states
from celery.exceptions import Ignore, Retry
from django.utils.dateparse import parse_datetime

from jobclaims import leases
from jobclaims.claiming import (
    holding,
    misordered_tasks,
    slot_key,
    validate_max_run_time,
    validate_wait,
)
from jobclaims.claims import engine
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.clock import database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import LeaseLapsed
from jobclaims.models import JobRun
from jobclaims.slots import Slots
from jobclaims.windows import WindowSpec

#: Message headers a retry carries back: the window it is for, the token of
#: the claim it holds, and until when (database clock) it waits for a holder.
WINDOW_HEADER = "jobclaims_window"
TOKEN_HEADER = "jobclaims_token"
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse bad claim options as the task is defined, naming the fix."""
        super().__init_subclass__(**kwargs)
        _refuse_unknown_options(cls)
        Slots.of_window(cls.claim_window)
        if cls.claim_lease is not None and (problem := leases.problem(cls.claim_lease)):
            raise ValueError(f"claim_lease {problem}")
        validate_max_run_time(cls.claim_max_run_time)
        validate_wait(cls.claim_wait)

    @property
    def claimed_run(self) -> JobRun:
        """The claim the running call holds: its window, attempt and owner.

        For a bound task's body (``bind=True``), as ``self.claimed_run``;
        ``ensure_held()`` and ``fenced()`` are there for long work.
        """
        run: JobRun = self.request.jobclaims_run
        return run

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        lease = self.claim_lease or jobclaims_settings.default_lease
        headers = self.request.headers or {}
        slots = Slots.of_window(self.claim_window)
        key = headers.get(WINDOW_HEADER) or self._first_delivery_key() or slot_key(slots)
        self.request.jobclaims_window = key
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
        self.request.jobclaims_run = run
        try:
            with holding(run, lease, self.claim_max_run_time, keep_on=(Retry,)):
                return super().__call__(*args, **kwargs)
        except Retry as retry:
            _keep_for_retry(run, retry, lease)
            raise
        except LeaseLapsed:
            # The claim came back too late to start on: as refused by a row
            # it did not see, try again at once (its lease may be free now).
            refusal = Refusal(self.name, key, Reason.HELD)
            return self._refused(refusal, lease, headers.get(WAIT_HEADER))

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
        return f"{engine.process_owner()}{_task_mark(self.request.id)}" if self.request.id else None

    def _first_delivery_key(self) -> str | None:
        """The key of the window a redelivered message's first delivery claimed, or ``None``.

        Celery redelivers an ``acks_late`` message whose worker died, maybe
        after its window ended; it must finish that window, not claim the
        one it arrives in and leave the dead run's window unfinished. The
        claim's owner ends with the task's id, which a redelivery keeps.
        Asked only of a redelivery: a first delivery costs no statement more.
        """
        if not (self.request.delivery_info or {}).get("redelivered"):
            return None
        first_delivery = JobRun.objects.running().filter(
            job=self.name, owner__endswith=_task_mark(self.request.id)
        )
        return first_delivery.values_list("window", flat=True).first()

    def _resumed(self, key: str, token: str | None, lease: datetime.timedelta) -> JobRun | None:
        """The claim a retried call still holds, its lease renewed; or ``None``."""
        if token is None:
            return None
        run = JobRun.objects.running().filter(job=self.name, window=key, token=token).first()
        if run is None or not run.renew(lease):
            return None  # Lost meanwhile: claim the window like any other call.
        return run

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
        its meta where its result would go, so the callback runs.
        """
        request = self.request
        if not (self.ignore_result or request.ignore_result):
            self.update_state(state=states.IGNORED, meta=meta)
        if request.chord:
            self.backend.on_chord_part_return(request, states.IGNORED, meta)


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


def _keep_for_retry(run: JobRun, retry: Retry, lease: datetime.timedelta) -> None:
    """Extend the lease past the retry's start, so no other call takes the window.

    Should the worker die before the retry runs, the lease still ends, a
    lease after the retry was due, and the next call takes the window over.
    """
    when = retry.when
    if isinstance(when, datetime.datetime):
        now = datetime.datetime.now(tz=when.tzinfo or datetime.timezone.utc)
        delay = max(when - now, datetime.timedelta())
    else:
        delay = datetime.timedelta(seconds=float(when or 0))
    run.renew(min(lease + delay, leases.MAX_LEASE))


#: A task id this long or longer is recorded by its hash: the owner column
#: holds the host, process and task id in 255 characters.
_LONGEST_TASK_ID = 64


def _task_mark(task_id: str) -> str:
    """How a claim's owner names the task id: as is, or hashed when long."""
    if len(task_id) >= _LONGEST_TASK_ID:
        task_id = "sha256:" + hashlib.sha256(task_id.encode()).hexdigest()[:40]
    return f" task {task_id}"


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
