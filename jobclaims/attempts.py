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
- its scheduler stopped it at its timeout (``jobclaims.timeouts``): a
  failure like any other, ``timed-out`` once no retry is left;
- an operator cancelled it (``jobclaims.cancels``): its row says so
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

from django.db.models import F, TextField, Value
from django.db.models.functions import Concat

from jobclaims import durations
from jobclaims.clock import database_now
from jobclaims.models import JobRun

ZERO = datetime.timedelta()


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
    run: JobRun, policy: RetryPolicy, why: str, final: str = JobRun.Status.FAILED
) -> str | None:
    """Count a failure of ``run`` and schedule its retry if the policy has one left.

    ``run`` is the claim as the scheduler took it: the row is changed only if
    its run still holds it or recorded its failure. Returns the status
    written (``retrying`` or ``final``), or ``None`` when the run succeeded,
    an operator cancelled it, or another instance holds the row now.
    """
    failures = _stored_failures(run)
    if failures is None:
        return None
    if failures + 1 > policy.retries:
        status, retry_in = final, None
    else:
        status, retry_in = JobRun.Status.RETRYING, policy.wait(failures + 1)
    # A timeout is what the process's own traceback does not say.
    settled = _settle(
        run, status, why, retry_in=retry_in, failed=True, why_first=final != JobRun.Status.FAILED
    )
    return status if settled else None


def after_timeout(run: JobRun, policy: RetryPolicy, why: str) -> str | None:
    """``after_failure()`` for a run its scheduler stopped at its timeout:
    a failure, recorded ``timed-out`` once no retry is left."""
    return after_failure(run, policy, why, final=JobRun.Status.TIMED_OUT)


def _stored_failures(run: JobRun) -> int | None:
    """The row's failure count, while the run holds it or recorded its failure."""
    return (
        JobRun.objects.using(run._state.db)
        .filter(pk=run.pk, token=run.token, status__in=_UNSETTLED)
        .values_list("failures", flat=True)
        .first()
    )


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
) -> bool:
    """One compare-and-set: the run's row, if it is still the run's and unsettled."""
    db = run._state.db
    assert db is not None, "a claimed run was saved, so it has a database"
    now = database_now(db)
    rows = JobRun.objects.using(db).filter(pk=run.pk, token=run.token, status__in=_UNSETTLED)
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
