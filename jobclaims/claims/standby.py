"""A bound on the wait for a synchronous standby, so that no claim hangs.

With synchronous replication, PostgreSQL commits a transaction on the
primary, then waits for a standby to acknowledge it before it tells the
client. None of the server's timeouts covers that wait (``lock_timeout``
and ``statement_timeout`` end before the commit), so with no standby
answering, a claim, a renewal or a release would wait until someone killed
the process.

jobclaims cancels a wait that outlasts ``JOBCLAIMS["STANDBY_TIMEOUT"]``, from
one watchdog thread per process, with the driver's cancel request. What
PostgreSQL does then decides what jobclaims may do: the commit is not undone.
It stands on the primary, the client is told it succeeded (with a warning,
"canceling wait for synchronous replication"), and a failover before the
standby catches up loses it. So a claim whose wait was cancelled is not run
(``StandbyTimeout``), and is recorded failed on the primary, so that the job
runs once a standby answers; a release or a renewal whose wait was cancelled
is logged. MariaDB and SQLite have no such wait: nothing is armed there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections, transaction

from jobclaims.claims.statements import ClaimRow, claim_statements
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import StandbyTimeout

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper


logger = logging.getLogger("jobclaims")


@dataclass(eq=False)
class Watch:
    """One bounded wait: whether its time ran out, and the statement was cancelled."""

    deadline: float
    cancel: Callable[[], object] = field(repr=False)
    fired: bool = False
    #: Set once the cancel request of a fired watch has been sent; waited
    #: for with ``_Watchdog.wait_until_sent()``.
    sent: bool = False


class _Watchdog:
    """Cancels the statements whose watches pass their deadline.

    Arming and disarming a watch take a lock and a set operation; the thread
    is woken only when a watch is due sooner than it planned to wake, so
    claims in a row cost it nothing. Every statement arms a watch and few
    ever fire, so a watch carries no event of its own to wait on: the rare
    block whose watch fired waits on the watchdog's one condition.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancel_sent = threading.Condition(self._lock)
        self._watches: set[Watch] = set()
        self._woken = threading.Event()
        self._wakes_at = float("inf")
        self._thread: threading.Thread | None = None

    def arm(self, cancel: Callable[[], object], timeout: float) -> Watch:
        watch = Watch(time.monotonic() + timeout, cancel)
        with self._lock:
            self._watches.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="jobclaims standby watchdog", daemon=True
                )
                self._thread.start()
            if watch.deadline < self._wakes_at:
                self._woken.set()
        return watch

    def disarm(self, watch: Watch) -> None:
        with self._lock:
            self._watches.discard(watch)

    def wait_until_sent(self, watch: Watch, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a fired watch's cancel request to be sent."""
        with self._lock:
            self._cancel_sent.wait_for(lambda: watch.sent, timeout)

    def _sent(self, watch: Watch) -> None:
        with self._lock:
            watch.sent = True
            self._cancel_sent.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = {watch for watch in self._watches if watch.deadline <= now}
                self._watches -= due
                for watch in due:
                    watch.fired = True
                deadlines = [watch.deadline for watch in self._watches]
                self._wakes_at = min(deadlines, default=now + 3600)
                self._woken.clear()
            for watch in due:
                try:
                    watch.cancel()
                except Exception as error:  # A closed connection has nothing to cancel.
                    logger.warning("Could not cancel a wait for the standby: %s", error)
                finally:
                    self._sent(watch)
            self._woken.wait(max(self._wakes_at - time.monotonic(), 0))


_watchdog = _Watchdog()

#: What a block on a database without the wait gets: a watch that never fires.
_UNARMED = Watch(float("inf"), lambda: None)

#: How long a block waits for a fired watch's cancel request to be sent
#: before it closes the session: the request is one round trip on a new
#: connection, and the session is closed either way.
_CANCEL_SENT_WITHIN = 2.0


@contextmanager
def bounded(connection: BaseDatabaseWrapper) -> Iterator[Watch]:
    """Cancel what ``connection`` runs in the block once STANDBY_TIMEOUT passes.

    ``connection`` must be open. The watch says whether it was cancelled.
    A cancel request reaches the server when it does: one sent as the
    block's statement ended anyway would cancel whatever the session runs
    next, a statement of another claim. So once a watch fired, the session
    is closed after the block (outside a transaction), and the next
    statement runs on a new one that no cancel can reach.
    """
    if connection.vendor != "postgresql":
        yield _UNARMED
        return
    raw = connection.connection
    # psycopg 3.2+ cancels without blocking a thread on a slow server.
    cancel = getattr(raw, "cancel_safe", None) or raw.cancel
    watch = _watchdog.arm(cancel, jobclaims_settings.standby_timeout.total_seconds())
    try:
        yield watch
    finally:
        _watchdog.disarm(watch)
        if watch.fired:
            _watchdog.wait_until_sent(watch, _CANCEL_SENT_WITHIN)
            if not connection.in_atomic_block:
                # Closing a cancelled session may fail; Django forgets it anyway.
                with suppress(DatabaseError):
                    connection.close()


def claim_not_acknowledged(job: str, window: str, run: ClaimRow | None) -> StandbyTimeout:
    """Record a claim that no standby acknowledged failed, and say why it did not run.

    The claim is committed on the primary; marking it failed there, without
    waiting for a standby, lets the next instance take the window over at
    once, where it would otherwise wait out the lease. On a failover the
    promoted standby has neither, and the next instance claims anew.
    """
    timeout = jobclaims_settings.standby_timeout.total_seconds()
    cause = (
        f"{job} {window} did not run: the database did not confirm its claim within "
        f"{timeout:g} seconds (JOBCLAIMS['STANDBY_TIMEOUT']); with synchronous "
        "replication, no standby acknowledged the commit"
    )
    if run is None:
        return StandbyTimeout(f"{cause}. Nothing was claimed.")
    db = run._state.db
    assert db is not None, "a claimed run was saved, so it has a database"
    connection = connections[db]
    # A cancel request arrives when it arrives: one sent as the wait ended
    # anyway cancels the next statement instead, so there is a second try.
    for attempt in (1, 2):
        try:
            with transaction.atomic(using=db), connection.cursor() as cursor:
                # This transaction alone waits for no standby.
                cursor.execute("SET LOCAL synchronous_commit = local")
                claim_statements(connection).release(cursor, run, "failed", cause)
            break
        except DatabaseError as error:
            if attempt == 2:
                logger.warning(
                    "Could not record the unacknowledged claim of %s failed (%s); "
                    "the window is held until its lease ends",
                    run,
                    error,
                    extra={"job": run.job, "window": run.window, "owner": run.owner},
                )
    return StandbyTimeout(
        f"{cause}. The claim is committed on the primary only, recorded failed "
        "there, so the next instance retries the window once a standby answers."
    )


def warn_if_not_acknowledged(watch: Watch, what: str, run: ClaimRow) -> None:
    """Log that ``what`` stands on the primary alone, when its wait was cancelled."""
    if watch.fired:
        logger.warning(
            "No standby acknowledged %s of %s within %s; it is committed on the "
            "primary only, and a failover now would lose it",
            what,
            run,
            jobclaims_settings.standby_timeout,
            extra={"job": run.job, "window": run.window, "owner": run.owner},
        )


def commits_wait_for_a_standby(connection: BaseDatabaseWrapper) -> bool:
    """Whether a commit on ``connection`` waits for a synchronous standby.

    Asked of the server: ``synchronous_standby_names`` names a standby, and
    the session's ``synchronous_commit`` waits for one (not ``off`` or
    ``local``). Always False on MariaDB and SQLite.
    """
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('synchronous_standby_names'), "
            "current_setting('synchronous_commit')"
        )
        names, commit = cursor.fetchone()
    return bool(names.strip()) and commit not in ("off", "local")
