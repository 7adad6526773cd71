"""A run under its claim, whoever started it: it starts on a lease it knows
is held, renews it while it runs, and records how it ended.

``JobCommand``, ``claim()``, ``@claimed`` and ``ClaimedTask`` all run their
code inside ``holding()``, so a run started by the scheduler, cron, a task
queue or a hand behaves alike once it holds its claim.
"""

from __future__ import annotations

import datetime
import logging
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connections

from jobclaims.claims import retries
from jobclaims.exceptions import (
    ClaimLost,
    JobCancelled,
    JobTimedOut,
    LeaseLapsed,
    PausedBeforeStart,
)
from jobclaims.models import JobRun
from jobclaims.running import cancels
from jobclaims.running.checkins import CheckIns
from jobclaims.running.heartbeat import Heartbeat, lease_deadline
from jobclaims.running.stopping import stops_held_back
from jobclaims.time import leases

logger = logging.getLogger("jobclaims")


@contextmanager
def holding(
    run: JobRun,
    lease: datetime.timedelta,
    max_run_time: datetime.timedelta | None = None,
    keep_on: tuple[type[BaseException], ...] = (),
    on_cancel: Callable[[JobCancelled], None] | None = None,
    *,
    output: Callable[[], str | None] | None = None,
    check_ins: CheckIns | None = None,
) -> Iterator[JobRun]:
    """Hold ``run``'s claim while the block runs, then record how it ended.

    The lease is renewed in the background, until ``max_run_time`` after the
    claim if one is given: a run that hangs then loses its claim to the next
    instance, as a crashed one does. The claim is recorded succeeded when the
    block returns and failed, with the error, when it raises. If the claim was
    lost meanwhile nothing is recorded over the new holder, and ``ClaimLost``
    is raised. Stop signals are held back while the outcome is recorded (see
    ``jobclaims.running.stopping``).

    An exception of a type in ``keep_on`` ends the block and leaves the claim
    running, its lease no longer renewed: a task queue's retry, which comes
    back to the window as the same holder (``jobclaims.contrib.celery``).

    ``on_cancel`` is told when the heartbeat finds that an operator
    cancelled the run (``jobclaims.running.cancels``); without it the run's writes
    are refused from then on, and it goes on until it ends.

    ``output`` says, once the block has ended, what the run printed
    (``jobclaims.running.output``): the release records it with the outcome.
    The run checks in with its monitors as it starts and once its outcome is
    recorded (``check_ins``; by default the ``MONITORS`` that name its job,
    told the schedule its claim recorded: ``jobclaims.running.checkins``).

    The block starts only on a lease this process knows is still its own
    (``start_held()``), and while its job is not paused
    (``start_unpaused()``); otherwise ``LeaseLapsed`` is raised and
    nothing ran.
    """
    start_held(run, lease, max_run_time)
    start_unpaused(run)
    told = check_ins if check_ins is not None else CheckIns.for_run(run)
    told.started()
    try:
        with Heartbeat(run, lease, max_run_time, on_cancel):
            yield run
    except ClaimLost as lost:
        let_go_if_cancelled(run)
        told.finished(False, str(lost), _printed(output))
        raise
    except keep_on as kept:
        told.finished(False, _summary(kept), _printed(output))
        raise
    except BaseException as error:
        printed = _printed(output)
        with stops_held_back():
            record_failure(run, error, printed)
        told.finished(False, _summary(error), printed)
        raise
    printed = _printed(output)
    with stops_held_back():
        try:
            released = run.release(JobRun.Status.SUCCEEDED, output=printed)
        except DatabaseError as error:
            unrecorded = ClaimLost(
                f"{run.job} {run.window} ran, but the database did not take its success "
                f"({retries.summary(error)}) until its lease was gone; the next instance takes "
                "the window over"
            )
            told.finished(False, str(unrecorded), printed)
            raise unrecorded from error
    if not released:
        let_go_if_cancelled(run)
        taken = ClaimLost(
            f"{run.job} {run.window} was taken over by another instance while "
            "this one ran (its lease ended: it stopped renewing it, paused, was "
            "cut off, expired by an operator or ran past its max run time), so "
            "its success was not recorded"
        )
        told.finished(False, str(taken), printed)
        raise taken
    told.finished(True, output=printed)


def _printed(output: Callable[[], str | None] | None) -> str | None:
    """What the run printed, if it was captured."""
    return None if output is None else output()


def _summary(error: BaseException) -> str:
    """An error's one-line summary: ``RuntimeError: the ledger API is down``."""
    return "".join(traceback.format_exception_only(error)).strip()


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


#: How recent, in seconds, the claim's own read of the pauses after its
#: commit must be for the run to start on it without reading them again:
#: as recent as a new read's answer would be, once its round trip and the
#: process's wait for a core under load are counted.
PAUSES_READ_WITHIN = 0.01


def start_unpaused(run: JobRun) -> None:
    """Let the run start only if its job is not paused, by a read right before it starts.

    A claim taken before a pause committed may start well after it: a
    scheduler's child starts up, a fire waits out its jitter, a task waits
    in its queue. A pause promises that no run of the job starts from its
    commit, so the run reads the pauses once more, the last thing before
    its block runs; a paused job's run gives its claim back, recorded
    cancelled by the pause (``JobRun.give_back()``), and raises
    ``PausedBeforeStart``: nothing ran. A read that fails fails the start,
    as a claim that fails does: nothing ran, and the lease ends on its own.

    A run that starts at once on its claim (``claim()``, ``@claimed``, a
    command run by hand or cron) starts on the claim's own read after its
    commit (``JobRun.unpaused_at``) while it is less than
    ``PAUSES_READ_WITHIN`` old: a read sent now would take about that long
    to answer, so the look is as late as a new read's would be.
    """
    if run.unpaused_at is not None and leases.clock() - run.unpaused_at < PAUSES_READ_WITHIN:
        return
    try:
        refusal = run.paused()
        if refusal is not None:
            run.give_back(refusal)
    except DatabaseError as error:
        lapsed = LeaseLapsed(
            run.job,
            run.window,
            f"the read of its job's pauses before its start failed ({retries.summary(error)})",
        )
        logger.warning("%s", lapsed, extra={"job": run.job, "window": run.window})
        raise lapsed from error
    if refusal is not None:
        paused = PausedBeforeStart(run.job, run.window, refusal)
        logger.info("%s", paused, extra={"job": run.job, "window": run.window, "owner": run.owner})
        raise paused


def record_failure(run: JobRun, error: BaseException, output: str | None = None) -> None:
    """Record the run failed with ``error``, and what it printed (``output``,
    if captured), so the next instance retries it at once.

    The error's one-line summary comes first, then the traceback. A run
    stopped at its timeout is recorded timed out, a failure of its own name.
    """
    db = run._state.db
    assert db is not None, "a claimed run was saved, so it has a database"
    connection = connections[db]
    if not connection.in_atomic_block:
        # The job may have failed because the connection died: reconnect.
        connection.close_if_unusable_or_obsolete()
    summary = _summary(error)
    try:
        status = JobRun.Status.TIMED_OUT if isinstance(error, JobTimedOut) else JobRun.Status.FAILED
        if not run.release(status, error=f"{summary}\n\n{traceback.format_exc()}", output=output):
            cancels.let_go(run)
    except DatabaseError as db_error:
        logger.error(
            "Could not record the failure of %s (%s); the next run takes the "
            "window over when the lease ends",
            run,
            db_error,
            extra={"job": run.job, "window": run.window, "owner": run.owner},
        )


def let_go_if_cancelled(run: JobRun) -> None:
    """Let go of ``run``'s window if an operator cancelled it, now that the
    run stopped (``cancels.let_go()``); else its lease runs out on its own."""
    try:
        cancels.let_go(run)
    except DatabaseError as error:
        logger.warning(
            "Could not let go of %s after it stopped (%s); its window opens when its lease ends",
            run,
            retries.summary(error),
            extra={"job": run.job, "window": run.window, "owner": run.owner},
        )
