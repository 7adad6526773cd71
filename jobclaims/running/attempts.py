"""What becomes of a scheduled fire whose run did not succeed: a retry, a hand-off, or failed.

A scheduler settles every run it started once the run's process has ended,
by one compare-and-set on the claim row (the claim's token and a status
that is not final), so that whichever host looks next reads one decision:

- the run succeeded: nothing to do;
- a stop interrupted it (the scheduler's own SIGTERM or SIGINT, passed on
  after the grace): the fire is *handed off*, ``retrying`` with its retry
  due at once, and not counted as a failure, so another live scheduler
  takes it over at its next look, whatever the fire's age;
- it failed, or its process died (SIGKILL, the OOM killer): one more
  failure; while failures are within the job's ``retries`` the fire is
  ``retrying`` with the next attempt due after the backoff, else ``failed``;
- its scheduler stopped it at its timeout (``jobclaims.running.timeouts``): a
  failure like any other, ``timed-out`` once no retry is left;
- an operator cancelled it (``jobclaims.running.cancels``): its row says so
  already, and is left as it is: a cancel is not retried.

Every scheduler claims due retries as it claims fires, so each attempt runs
on exactly one host however many look. A run started by cron (no scheduler)
is never settled here: its next instance of the window takes a failed claim
over, as before.
"""

from __future__ import annotations

import datetime
import random
from dataclasses import dataclass

from django.db.models import F, Q, QuerySet, TextField, Value
from django.db.models.functions import Concat

from jobclaims.models import JobRun
from jobclaims.time import durations
from jobclaims.time.clock import database_now

ZERO = datetime.timedelta()
#: A filter no row passes: the unsettled rows, and nothing more.
NOTHING = Q(pk__in=[])


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how far apart, a scheduled job's failed fire runs again."""

    #: Attempts after the first failure; 0: a failure is final.
    retries: int = 0
    #: The wait before the first retry; each next one doubles it.
    backoff: datetime.timedelta = datetime.timedelta(seconds=10)
    #: No wait grows beyond this.
    backoff_max: datetime.timedelta = datetime.timedelta(minutes=10)

    def wait(self, failures: int) -> datetime.timedelta:
        """The wait before the attempt after ``failures`` failures.

        Exponential, capped at ``backoff_max``, with "equal jitter": between
        half of that and all of it, so the retries of fires that failed
        together (a database outage) do not all come back at one moment,
        and never sooner than half the documented wait.
        """
        doublings = min(max(failures - 1, 0), 40)  # Past the cap long before.
        full = min(self.backoff * (1 << doublings), self.backoff_max)
        return full / 2 + full / 2 * random.random()


def problems(name: str, retries: object, backoff: object, backoff_max: object) -> list[str]:
    """What is wrong with a job's retry attributes, as sentences naming the fix."""
    found = []
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        found.append(f"{name}: retries must be a whole number, 0 or more, not {retries!r}")
    for attribute, value in (("retry_backoff", backoff), ("retry_backoff_max", backoff_max)):
        if problem := durations.problem(value, zero=True):
            found.append(f"{name}: {attribute} {problem}")
    if not found and backoff > backoff_max:  # type: ignore[operator]
        found.append(
            f"{name}: retry_backoff ({backoff}) is longer than retry_backoff_max "
            f"({backoff_max}); raise retry_backoff_max or shorten retry_backoff"
        )
    return found


def hand_off(run: JobRun, why: str) -> bool:
    """Leave ``run``'s fire to the next scheduler that looks, at once.

    For a run that a stop interrupted: it is no failure of the job, so it is
    not counted. Returns whether the row was still ours to hand off.
    """
    return _settle(run, JobRun.Status.RETRYING, why, retry_in=ZERO, failed=False)


def after_failure(
    run: JobRun,
    policy: RetryPolicy,
    why: str,
    final: str = JobRun.Status.FAILED,
    also: Q = NOTHING,
) -> str | None:
    """Count a failure of ``run`` and schedule its retry if the policy has one left.

    ``run`` is the claim as the scheduler took it: the row is changed only if
    its run still holds it or recorded its failure (or is one of ``also``,
    a filter on the row: ``after_timeout()``). Returns the status
    written (``retrying`` or ``final``), or ``None`` when the run succeeded,
    an operator cancelled it, or another instance holds the row now.
    """
    failures = _stored_failures(run, also)
    if failures is None:
        return None
    if failures + 1 > policy.retries:
        status, retry_in = final, None
    else:
        status, retry_in = JobRun.Status.RETRYING, policy.wait(failures + 1)
    # A timeout is what the process's own traceback does not say.
    settled = _settle(
        run,
        status,
        why,
        retry_in=retry_in,
        failed=True,
        why_first=final != JobRun.Status.FAILED,
        also=also,
    )
    return status if settled else None


def after_timeout(
    run: JobRun, policy: RetryPolicy, why: str, stopped_at: datetime.datetime | None = None
) -> str | None:
    """``after_failure()`` for a run its scheduler stopped at its timeout:
    a failure, recorded ``timed-out`` once no retry is left.

    A run that recorded its success once its scheduler had sent the
    timeout's SIGTERM (``stopped_at``, by the database clock) returned
    because of it (its own SIGTERM handler stopped its work): its timeout
    cut it short, so it is settled as timed out too. A success recorded
    before is left as it is.
    """
    late = Q(status=JobRun.Status.SUCCEEDED, finished_at__gte=stopped_at) if stopped_at else NOTHING
    return after_failure(run, policy, why, final=JobRun.Status.TIMED_OUT, also=late)


def _stored_failures(run: JobRun, also: Q = NOTHING) -> int | None:
    """The row's failure count, while the run holds it or recorded its failure."""
    return _unsettled(run, also).values_list("failures", flat=True).first()


def _unsettled(run: JobRun, also: Q) -> QuerySet[JobRun]:
    """The run's row, if it is still the run's and unsettled (or one of ``also``)."""
    rows = JobRun.objects.using(run._state.db).filter(pk=run.pk, token=run.token)
    return rows.filter(Q(status__in=_UNSETTLED) | also)


#: A run's row a scheduler may still settle: running (its process died
#: before recording) or failed (as the process recorded it, or timed out).
_UNSETTLED = (JobRun.Status.RUNNING, JobRun.Status.FAILED, JobRun.Status.TIMED_OUT)
#: The statuses a process records with its traceback, which settling keeps.
_RECORDED = (JobRun.Status.FAILED, JobRun.Status.TIMED_OUT)


def _settle(
    run: JobRun,
    status: str,
    why: str,
    *,
    retry_in: datetime.timedelta | None,
    failed: bool,
    why_first: bool = False,
    also: Q = NOTHING,
) -> bool:
    """One compare-and-set: the run's row, if it is still the run's and unsettled."""
    db = run._state.db
    assert db is not None, "a claimed run was saved, so it has a database"
    now = database_now(db)
    rows = _unsettled(run, also)
    changes: dict[str, object] = {
        "status": status,
        "holds_job": None,
        "retry_at": None if retry_in is None else now + retry_in,
        "finished_at": now,
    }
    if failed:
        changes["failures"] = F("failures") + 1
    # A process that recorded its failure left its traceback: keep it
    # (after ``why``, with ``why_first``).
    kept = (
        Concat(Value(f"{why}\n\n"), F("error"), output_field=TextField())
        if why_first
        else F("error")
    )
    written = rows.filter(status__in=_RECORDED).exclude(error="").update(error=kept, **changes)
    written = written or rows.update(error=why, **changes)
    if written:
        run.status = status
    return bool(written)
