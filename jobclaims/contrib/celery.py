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
  ``held_until`` as its meta, never a SUCCESS with a ``None`` result;
- the window is held by a run whose lease ends within ``claim_wait``: RETRY,
  and the task comes back for the same window when that lease ends. A run
  that died (a worker SIGKILLed, its message redelivered by ``acks_late``)
  is taken over then, instead of its window being lost; the redelivered
  message comes back to the window its first delivery claimed, even once
  that window has ended;
- the task called ``self.retry()``: RETRY, and the claim stays this task's:
  the retry comes back to the same window as the same holder, its lease
  kept long enough, and ``attempt`` does not count Celery's retries.
"""

from __future__ import annotations

import datetime
from typing import Any

from celery import Task, states
from celery.exceptions import Ignore, Retry
from django.utils.dateparse import parse_datetime

from jobclaims import engine, leases
from jobclaims.claiming import holding, validate_max_run_time, validate_wait, window_key
from jobclaims.clock import database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import LeaseLapsed
from jobclaims.models import JobRun
from jobclaims.states import Reason, Refusal
from jobclaims.windows import WindowSpec, resolve

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
    #: How long after the first refusal the task keeps coming back to a
    #: window held by a run whose lease has not ended; ``None``: one lease.
    claim_wait: datetime.timedelta | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse bad claim options as the task is defined, naming the fix."""
        super().__init_subclass__(**kwargs)
        resolve(cls.claim_window)
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
        window = (
            headers.get(WINDOW_HEADER)
            or self._first_delivery_window()
            or window_key(self.claim_window)
        )
        self.request.jobclaims_window = window
        run: JobRun | Refusal | None = self._resumed(window, headers.get(TOKEN_HEADER), lease)
        if run is None:
            run = JobRun.objects.try_claim(
                self.name,
                window,
                lease=lease,
                allow_overlap=self.claim_allow_overlap,
                schedule=resolve(self.claim_window).name,
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
            refusal = Refusal(self.name, window, Reason.HELD)
            return self._refused(refusal, lease, headers.get(WAIT_HEADER))

    def retry(self, *args: Any, **options: Any) -> Any:
        """Retry for the same window, as its holder if this call holds it."""
        headers = {**(self.request.headers or {}), **options.pop("headers", {})}
        window = getattr(self.request, "jobclaims_window", None)
        if window is not None:
            headers[WINDOW_HEADER] = window
        run = getattr(self.request, "jobclaims_run", None)
        if run is not None:
            headers[TOKEN_HEADER] = str(run.token)
        return super().retry(*args, headers=headers, **options)

    def _holder(self) -> str | None:
        """The claim's owner: this process, and the task's id if it has one."""
        return f"{engine.process_owner()} task {self.request.id}" if self.request.id else None

    def _first_delivery_window(self) -> str | None:
        """The window a redelivered message's first delivery claimed, or ``None``.

        Celery redelivers an ``acks_late`` message whose worker died, maybe
        after its window ended; it must finish that window, not claim the
        one it arrives in and leave the dead run's window unfinished. The
        claim's owner ends with the task's id, which a redelivery keeps.
        Asked only of a redelivery: a first delivery costs no statement more.
        """
        if not (self.request.delivery_info or {}).get("redelivered"):
            return None
        first_delivery = JobRun.objects.running().filter(
            job=self.name, owner__endswith=f" task {self.request.id}"
        )
        return first_delivery.values_list("window", flat=True).first()

    def _resumed(self, window: str, token: str | None, lease: datetime.timedelta) -> JobRun | None:
        """The claim a retried call still holds, its lease renewed; or ``None``."""
        if token is None:
            return None
        run = JobRun.objects.running().filter(job=self.name, window=window, token=token).first()
        if run is None or not run.renew(lease):
            return None  # Lost meanwhile: claim the window like any other call.
        return run

    def _refused(self, refusal: Refusal, lease: datetime.timedelta, wait_until: str | None) -> None:
        """Come back when the lease in the way ends, or mark the task ignored."""
        now = database_now(jobclaims_settings.claims_database(JobRun))
        deadline = parse_datetime(wait_until) if wait_until else None
        if deadline is None:
            deadline = now + (self.claim_wait or lease)
        pause = refusal.pause(now, deadline)
        if self.request.called_directly or self.request.is_eager:
            return None  # Called as a function, or by apply(): no queue to come back through.
        if pause is not None:
            raise self.retry(
                countdown=pause.total_seconds(),
                max_retries=None,
                headers={WAIT_HEADER: deadline.isoformat()},
            )
        if not (self.ignore_result or self.request.ignore_result):
            self.update_state(state=states.IGNORED, meta=_meta(refusal))
        raise Ignore(str(refusal))


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
