"""A job's hard timeout: a run past it is stopped, and recorded timed out.

A ``JobCommand`` with ``timeout = timedelta(...)`` is stopped by whoever
can, depending on how it was started:

- under ``jobclaims_scheduler``, by the scheduler that started its process:
  SIGTERM once the process has run for ``timeout``, then SIGKILL
  ``timeout_grace`` later if it is still running. The scheduler then
  settles the fire as timed out (``jobclaims.running.attempts``);
- started any other way (cron, by hand), by the process itself: a timer
  thread sends the process SIGTERM ``timeout`` after its run started, and if
  the run ignores it, records the run timed out at the end of the grace
  and kills the process (``stopping.SelfStop``).

Either way the row ends ``timed-out``, however the run ends once its
timeout came (a job whose own SIGTERM handler stops its work and returns
included), a failure: health counts it with the
failed runs, and under a scheduler it is one of the job's ``retries``
(then ``retrying``, like any failure with retries left). A hung run has
failed its job as surely as one that raised.

``max_run_time`` is another thing: it only stops renewing the lease, so
that a hung run loses its window to the next instance; the hung process
itself goes on. ``timeout`` ends the process.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from jobclaims.exceptions import JobTimedOut
from jobclaims.models import JobRun
from jobclaims.running.stopping import SelfStop
from jobclaims.time import durations

#: How long a run stopped at its timeout (or cancelled) has between SIGTERM and SIGKILL.
DEFAULT_GRACE = datetime.timedelta(seconds=10)


def problems(name: str, timeout: object, grace: object) -> list[str]:
    """What is wrong with a job's ``timeout`` and ``timeout_grace``, naming the fix."""
    found = []
    if problem := durations.problem(timeout, none_means="for no timeout"):
        found.append(f"{name}: timeout {problem}")
    if problem := durations.problem(grace, zero=True):
        found.append(f"{name}: timeout_grace {problem}")
    return found


def seconds(span: datetime.timedelta) -> float:
    """``span`` as a wait a thread can make (a timeout of centuries included)."""
    return min(span.total_seconds(), threading.TIMEOUT_MAX)


def killed_message(timeout: datetime.timedelta, grace: datetime.timedelta, by: str) -> str:
    """The error recorded for a run that ignored the SIGTERM sent at its timeout."""
    return (
        f"Timed out after {timeout}: {by} sent it SIGTERM at its timeout, and killed "
        f"it (SIGKILL) {grace} later, since it was still running."
    )


@contextmanager
def timing_out(
    run: JobRun,
    timeout: datetime.timedelta | None,
    stop: SelfStop,
    output: Callable[[], str | None] = lambda: None,
) -> Iterator[None]:
    """Stop ``run`` with ``stop`` once the block has run for ``timeout``.

    For a run its own process times: one started without a scheduler. If
    the run ignores the stop, it is recorded timed out before the kill,
    with what it had printed so far (``output``). A run its timeout
    reached raises ``JobTimedOut`` from the block however it ended: by
    ``JobTimedOut``, by returning, or by another error.
    """
    if timeout is None:
        yield
        return
    grace = datetime.timedelta(seconds=stop.grace)

    def last_words() -> None:
        why = killed_message(timeout, grace, "its own process")
        run.release(JobRun.Status.TIMED_OUT, why, output())

    timer = threading.Timer(seconds(timeout), stop.stop, (JobTimedOut(timeout), last_words))
    timer.daemon = True
    timer.start()
    try:
        yield
    except BaseException as error:
        timer.cancel()
        if (timed_out := _timed_out_anyway(stop, error)) is not None:
            raise timed_out from error
        raise
    timer.cancel()
    if (timed_out := _timed_out_anyway(stop, None)) is not None:
        raise timed_out


def _timed_out_anyway(stop: SelfStop, ended: BaseException | None) -> JobTimedOut | None:
    """The ``JobTimedOut`` a run ended otherwise than by it (``ended``: the
    error it raised, or None when it returned) must raise, if its timeout
    came: the timeout's SIGTERM raised ``JobTimedOut``, which the job caught,
    or its own SIGTERM handler stopped its work. Its work was cut short by
    the timeout all the same: no success, and not another failure."""
    sent = stop.settle()  # A SIGTERM on its way raises its JobTimedOut here.
    if not isinstance(sent, JobTimedOut) or ended is sent:
        return None
    how = (
        "its run_job() returned after the SIGTERM"
        if ended is None
        else f"its run_job() then raised {type(ended).__name__}"
    )
    return JobTimedOut(sent.timeout, how)
