"""Keeping a long run's lease alive while it works.

A lease short enough to free a crashed run's window quickly is shorter than
many healthy runs. The heartbeat renews it every third of the lease, so a
live run keeps its claim through two missed renewals and a dead one loses it
within one lease. The third is counted on the lease this process knows it
holds (``JobRun.held_until``), from before each renewal was sent: a renewal
whose answer came back late is followed by the next at once.

The heartbeat is a thread of its own, so it beats on while the job's main
thread hangs. The thread starts when its first look is due (``_LateStarts``):
a run that ends before then, as a task of a few milliseconds does, never
starts one. Two things stop it: a renewal that finds the lease ended (an
operator expired it, or it lapsed) treats the claim as lost and renews no
more, and a maximum run time past which the lease is not extended, so a hung
run loses its window to the next instance as a crashed one does.
Between renewals it looks every ``CANCEL_POLL`` whether an operator
cancelled the run (``jobclaims.running.cancels``): one read of the run's row
by primary key, which takes no lock. A cancel it finds, or a renewal
refused because of one, tells the job's process, which stops the run: a
cancel is heard within about a second, whatever the lease.
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from jobclaims.exceptions import JobCancelled
from jobclaims.models import JobRun
from jobclaims.running.cancels import cancellation
from jobclaims.time import leases

logger = logging.getLogger("jobclaims")

#: How often, between renewals, a run looks whether an operator cancelled it.
CANCEL_POLL = 1.0

#: How much sooner than its first look a heartbeat's thread may start, so
#: that the heartbeats due close together start together (``_LateStarts``).
START_EARLY = 0.1


class Heartbeat:
    """Renews a claim's lease from a thread with its own database connection.

    Use it as a context manager around the work. It stops renewing as soon as
    a renewal finds the lease ended or the claim taken over: it never keeps a
    lost claim alive. With ``max_run_time`` it extends the lease no further
    than that long after the claim, by the database clock.
    """

    def __init__(
        self,
        run: JobRun,
        lease: datetime.timedelta,
        max_run_time: datetime.timedelta | None = None,
        on_cancel: Callable[[JobCancelled], None] | None = None,
    ):
        self.run = run
        self.lease = lease
        self.deadline = lease_deadline(run, max_run_time)
        #: Told when the heartbeat finds that an operator cancelled the run.
        self.on_cancel = on_cancel
        self._failed = False
        self._stopped = threading.Event()
        #: Held while the thread is made and started, so that an end of the
        #: run either comes first (no thread) or joins the thread started.
        self._starting = threading.Lock()
        #: Made when it starts: most runs end before then.
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        first_look = min(self._until_due(), CANCEL_POLL)
        _late_starts.add(self, time.monotonic() + first_look)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopped.set()
        with self._starting:
            thread = self._thread
        if thread is not None:
            thread.join()

    def start(self) -> None:
        """Start the thread, its first look due now, unless the run has ended."""
        with self._starting:
            if self._stopped.is_set():
                return
            self._thread = threading.Thread(
                target=self._beat, name=f"jobclaims heartbeat: {self.run}", daemon=True
            )
            self._thread.start()

    def _beat(self) -> None:
        try:
            renewing = not self._past_deadline()
            due = time.monotonic() + self._until_due()
            wait = 0.0  # Started when its first look is due.
            while not self._stopped.wait(wait):
                if not (renewing and time.monotonic() >= due):
                    if self._told_of_cancel():
                        return
                elif not self._renew():
                    self._lost()
                    return
                else:
                    renewing = not self._past_deadline()
                    due = time.monotonic() + self._until_due()
                wait = self._until_next_look(renewing, due)
        finally:
            # Django opens one connection per thread; this one is ours alone.
            connections.close_all()

    def _until_next_look(self, renewing: bool, due: float) -> float:
        """Seconds until the next renewal, or until the next look for a
        cancel (``CANCEL_POLL``), whichever is sooner."""
        if not renewing:
            return CANCEL_POLL
        return max(min(due - time.monotonic(), CANCEL_POLL), 0.0)

    def _lost(self) -> None:
        """The renewal found the lease ended: say why, and renew no more."""
        if self._told_of_cancel():
            return
        logger.warning(
            "The lease of %s ended before its renewal (expired by an "
            "operator, or it lapsed); it is no longer renewed, and the "
            "next instance takes the window over",
            self.run,
            extra=self._fields(),
        )

    def _told_of_cancel(self) -> bool:
        """Whether an operator cancelled the run, telling ``on_cancel`` so:
        one read of its row by primary key, which takes no lock. A read
        that fails says no, and the next look reads again."""
        try:
            cancelled = cancellation(self.run)
        except DatabaseError:
            self._connection().close()
            return False
        if cancelled is None:
            return False
        logger.warning("%s was %s", self.run, cancelled, extra=self._fields())
        if self.on_cancel is not None:
            self.on_cancel(cancelled)
        return True

    def _until_due(self) -> float:
        """Seconds until the next renewal: when two renewal intervals of the
        lease this process knows of are left, one interval after a fresh
        lease. A renewal that returned late (less than that left) is
        followed by the next at once, and one that fails for good ends the
        claim; a renewal that failed with an error waits a little."""
        interval = leases.renewal_interval(self.lease)
        if self._failed:
            return interval / 4
        return max(self.run.held_for() - 2 * interval, 0.0)

    def _past_deadline(self) -> bool:
        """Whether the lease reached the max run time, saying so the first time."""
        if self.deadline is None or self.run.expires_at < self.deadline:
            return False
        logger.warning(
            "%s reached its max run time: its lease is no longer renewed and "
            "ends at %s, when the next instance may take the window over",
            self.run,
            self.run.expires_at.isoformat(),
            extra=self._fields(),
        )
        return True

    def _renew(self) -> bool:
        """Renew once; a database error is retried at the next beat."""
        self._failed = False
        try:
            return self.run.renew(self.lease, until=self.deadline)
        except DatabaseError as error:
            self._failed = True
            logger.warning(
                "Could not renew the lease of %s: %s",
                self.run,
                error,
                extra=self._fields(),
            )
            self._connection().close()
            return True

    def _connection(self) -> BaseDatabaseWrapper:
        """This thread's connection to the run's database."""
        db = self.run._state.db
        assert db is not None, "a claimed run was saved, so it has a database"
        return connections[db]

    def _fields(self) -> dict[str, object]:
        return {"job": self.run.job, "window": self.run.window}


class _LateStarts:
    """Starts each heartbeat's thread when its first look is due, from one
    thread of this process's own.

    A heartbeat's thread first looks at its run one renewal short of two
    renewal intervals into the lease, or at the first look for a cancel
    (``CANCEL_POLL``), whichever is sooner. Starting it then, not as the
    run starts, spares a run that ends sooner (a task, a short job) a
    thread's start and join, which cost more than its claim's CPU.

    Each wake starts every heartbeat due within ``START_EARLY`` too, so a
    worker that begins a run every millisecond wakes this thread ten times
    a second, not a thousand: each wake took the GIL from the runs' own
    thread. A thread started early only looks sooner; none starts late.
    """

    _due: list[tuple[float, int, Heartbeat]]
    _numbers: Iterator[int]
    _changed: threading.Condition
    _thread: threading.Thread | None

    def __init__(self) -> None:
        self.forget()

    def add(self, heartbeat: Heartbeat, at: float) -> None:
        """Start ``heartbeat``'s thread at ``at`` on ``time.monotonic()``."""
        with self._changed:
            heapq.heappush(self._due, (at, next(self._numbers), heartbeat))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._start_due, name="jobclaims heartbeat starts", daemon=True
                )
                self._thread.start()
            elif self._due[0][2] is heartbeat:
                self._changed.notify()

    def _start_due(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                while self._due and self._due[0][0] <= now + START_EARLY:
                    heapq.heappop(self._due)[2].start()
                self._changed.wait(self._due[0][0] - now if self._due else None)

    def forget(self) -> None:
        """Start empty; again in a forked child, which has none of the
        parent's threads, and whose copy of the lock may have been held."""
        self._due = []
        self._numbers = itertools.count()
        self._changed = threading.Condition()
        self._thread = None


_late_starts = _LateStarts()
os.register_at_fork(after_in_child=_late_starts.forget)


def lease_deadline(
    run: JobRun, max_run_time: datetime.timedelta | None
) -> datetime.datetime | None:
    """When ``run``'s lease stops being extended: ``max_run_time`` after its claim."""
    if max_run_time is None:
        return None
    try:
        return run.claimed_at + max_run_time
    except OverflowError:  # Past the year 9999: no limit that could ever be met.
        return None
