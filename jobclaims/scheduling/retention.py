"""The schedulers keep the history bounded by themselves, with no cron line.

Every scheduled run writes a row, and every host that steps aside counts a
skip: a fleet of 50 jobs every 30 seconds writes 144,000 of each a day. Each
``RETENTION_EVERY`` (10 minutes), one scheduler deletes what is past the
bounds (``HISTORY_MAX_AGE``, ``HISTORY_MAX_ROWS_PER_JOB``) with
``jobclaims.controls.pruning.prune_history()``: short DELETEs sized to run
about 20 ms each, never a running row, never the row that tells a late
instance its window already ran, and by count never a row of the look-back
health reads missed runs from.

One host at a time, by jobclaims' own guarantee: a pass is the run of the
job ``jobclaims.retention`` for the period's window (a fixed bucket of
``RETENTION_EVERY``), claimed like any job's; the scheduler whose claim wins
prunes, the others record a skip. So each pass is in the admin and in
``jobclaims_status`` like any run, its output saying what it deleted, and
health watches it like any job: **failed** when a pass failed, **overdue**
when no pass succeeded for two periods (every scheduler stopped, or a pass
ran so long the next could not start: retention fell behind), **slow**,
**dead holder**. Pausing the job (``jobclaims_pause jobclaims.retention``)
pauses retention.

Off the scheduler's fire path: a thread of its own (``Keeper``), with its
own database connection, starts no process and holds no lock between two
DELETEs. A scheduler that stops stops its pass between two DELETEs and
records what it did; the next period's pass goes on from there. One killed
mid-pass leaves its claim to expire: the next scheduler to look takes it
over within ``LOOK``. ``jobclaims_scheduler --once`` runs the pass due, if
any, after its jobs have ended.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable

from django.db import connections

from jobclaims.claims.rule import Refusal
from jobclaims.conf import jobclaims_settings
from jobclaims.controls.pruning import Pruned, prune_history
from jobclaims.models import JobRun
from jobclaims.running.holding import holding
from jobclaims.time import durations
from jobclaims.time.clock import database_now
from jobclaims.time.slots import Slots
from jobclaims.time.windows import FixedWindow

#: The job each pass is a run of.
RETENTION_JOB = "jobclaims.retention"
#: A pass's lease, renewed while it runs: a scheduler killed mid-pass holds
#: it no longer than this.
LEASE = datetime.timedelta(minutes=1)
#: How often a scheduler looks for a pass whose holder died, between periods.
LOOK = 30.0
#: How long a stopped scheduler waits for its pass to end: one DELETE, and
#: the statement that records the pass.
STOP_WAIT = 10.0


def enabled() -> bool:
    """Whether the schedulers prune: a period, and a bound to prune to."""
    bounded = (
        jobclaims_settings.history_max_age is not None
        or jobclaims_settings.history_max_rows_per_job is not None
    )
    return jobclaims_settings.retention_every is not None and bounded


def slots() -> Slots:
    """The periods, as windows of the retention job: fixed buckets."""
    every = jobclaims_settings.retention_every
    assert every is not None, "asked only while retention is on"
    return Slots(FixedWindow(every))


def health_grace() -> datetime.timedelta | None:
    """How long after a period began its pass may succeed before health says
    the retention is overdue: two periods, so that one pass that ran long,
    or one period every scheduler missed (a deploy), is no alarm."""
    every = jobclaims_settings.retention_every
    return None if every is None else 2 * every


def due_pass(tried: str | None = None) -> str | None:
    """The key of the pass to claim: one whose holder died (its claim ran
    out with no outcome), if any, else the current period's, unless that is
    ``tried`` already."""
    dead = JobRun.objects.expired().filter(job=RETENTION_JOB).values_list("window", flat=True)
    if (key := dead.first()) is not None:
        return key
    current = slots().key_at(database_now(jobclaims_settings.claims_database(JobRun)))
    return None if current == tried else current


def run_pass(key: str, stop: Callable[[], bool] = lambda: False) -> Pruned | None:
    """Claim the pass ``key``, and prune under it; None when another host has it.

    ``stop`` is asked between two DELETEs: a pass stopped records what it
    did, a success, and the next period's pass goes on.
    """
    run = JobRun.objects.try_claim(
        RETENTION_JOB, key, lease=LEASE, schedule=slots().recorded_schedule, details=False
    )
    if isinstance(run, Refusal):
        return None
    said: list[str] = []
    with holding(run, LEASE, output=lambda: "\n".join(said)):
        pruned = prune_history(
            jobclaims_settings.history_max_age,
            jobclaims_settings.history_max_rows_per_job,
            keep_younger_than=jobclaims_settings.missed_look_back,
            stop=stop,
        )
        said += [pruned.said(), _bounds()]
        if pruned.stopped:
            said.append("Its scheduler stopped; the next pass goes on.")
    return pruned


def run_due_pass(warn: Callable[[str], None]) -> None:
    """Run the pass due now, if this process wins it: ``--once``'s, after its
    jobs. A failure is said, never raised: the next one tries again."""
    if not enabled():
        return
    try:
        if (key := due_pass()) is not None:
            run_pass(key)
    except Exception as error:
        warn(f"The history retention pass failed ({error!r}); the next one tries again")


def _bounds() -> str:
    age = jobclaims_settings.history_max_age
    rows = jobclaims_settings.history_max_rows_per_job
    aged = f"older than {durations.short(age)}" if age else "of any age kept"
    counted = f"at most {rows:,} finished runs and skips per job" if rows else "no bound by count"
    look_back = durations.short(jobclaims_settings.missed_look_back)
    return f"Bounds: {aged}; {counted}, besides the last {look_back}."


class Keeper:
    """A scheduler's retention thread: a pass each period, if its claim wins."""

    def __init__(self, stopping: threading.Event, warn: Callable[[str], None]):
        self.stopping = stopping
        self.warn = warn
        #: The period whose pass this host tried last: each is tried once.
        self.tried: str | None = None
        self.thread = threading.Thread(target=self._keep, name="jobclaims retention", daemon=True)

    @classmethod
    def started(cls, stopping: threading.Event, warn: Callable[[str], None]) -> Keeper:
        """A keeper whose thread runs until ``stopping`` is set; one that
        does nothing while retention is off."""
        keeper = cls(stopping, warn)
        if enabled():
            keeper.thread.start()
        return keeper

    def join(self) -> None:
        """Wait for a pass under way to stop (``stopping`` is set by then)."""
        if self.thread.is_alive():
            self.thread.join(STOP_WAIT)

    def _keep(self) -> None:
        try:
            while not self.stopping.is_set():
                self.stopping.wait(self._look())
        finally:
            connections.close_all()  # This thread's own connection.

    def _look(self) -> float:
        """Run the pass due, if this host wins it; return the seconds until
        the next look: the next period, or ``LOOK`` for a dead pass."""
        try:
            if (key := due_pass(self.tried)) is not None:
                self.tried = key
                run_pass(key, self.stopping.is_set)
            now = database_now(jobclaims_settings.claims_database(JobRun))
        except Exception as error:  # Whatever it was, the next period tries again.
            self.warn(f"The history retention pass failed ({error!r}); it is tried again")
            connections.close_all()
            return LOOK
        periods = slots()
        window = periods.window
        assert isinstance(window, FixedWindow)
        next_period = periods.start_of(periods.key_at(now)) + window.size
        # A little past the period's start, so the database clock has reached it too.
        return min((next_period - now).total_seconds() + 0.002, LOOK)
