"""Health reads that end in time, whatever the claims database does.

The alarm path (``jobclaims_status --check``, the health page's check and
the metrics) must answer most when the database does not. A server that
stopped refuses the connection at once; one that hangs (its processes
paused, its host swapping, a network that drops every packet) leaves a
connect or a query waiting for ever, and a scrape that times out says
nothing at all. Server-side timeouts (``statement_timeout``,
``max_statement_time``) are no help against a server that does not run,
and a connect timeout is the project's to set in ``DATABASES``.

So ``within()`` runs the read in a thread of its own, on the caller's own
connection to the claims database (shared for the read: the same session
and transaction, the same rows), and waits for it at most
``JOBCLAIMS["HEALTH_TIMEOUT"]``. A read that outlives it ends the caller's
wait with ``HealthTimeout``, a ``DatabaseError``, which every reader turns
into "cannot tell": exit 3, ``jobclaims_up 0``, an unavailable check. The
late read is then cut off: its socket is shut (SQLite's query interrupted),
so that it fails as soon as it next waits, and the connection is closed;
a read still connecting keeps the connection, closes it when its connect
returns, and the caller goes on with a new one. At most ``MOST_LATE`` late
reads wait at once in a process; past them, a read gives up at once.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Generic, TypeVar

from django.db import DatabaseError, connections

from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

_T = TypeVar("_T")

#: Late reads that may still wait on the database, in a process, before a
#: read gives up without trying: each holds a thread and a connection.
MOST_LATE = 4
#: How long a late read whose socket was shut has to end before the caller
#: leaves the connection to it: a blocked wait returns at once.
CUT_OFF_WITHIN = 1.0


class HealthTimeout(DatabaseError):
    """The claims database did not answer the health reads in ``HEALTH_TIMEOUT``."""


_late: set[_Read[object]] = set()
_late_lock = threading.Lock()


def within(read: Callable[[], _T]) -> _T:
    """``read()``'s result, or ``HealthTimeout`` once ``HEALTH_TIMEOUT`` has passed.

    ``read`` runs in another thread, on this thread's connection to the
    claims database; an exception it raises is raised here.
    """
    timeout = jobclaims_settings.health_timeout.total_seconds()
    alias = jobclaims_settings.claims_database(JobRun)
    with _late_lock:
        waiting = len(_late)
    if waiting >= MOST_LATE:
        raise HealthTimeout(
            f"{waiting} earlier health reads of this process still wait for the claims database"
        )
    attempt = _Read(alias, connections[alias], read)
    return attempt.result(timeout)


class _Read(Generic[_T]):
    """One read in a thread of its own, and what becomes of it if it is late."""

    def __init__(self, alias: str, connection: BaseDatabaseWrapper, read: Callable[[], _T]):
        self.alias = alias
        self.connection = connection
        self.read = read
        self.done = threading.Event()
        self.lock = threading.Lock()
        #: Set once the caller stopped waiting: the read closes the connection.
        self.abandoned = False
        self.value: _T | None = None
        self.error: BaseException | None = None
        #: The connection's socket, once the read has connected: a driver
        #: may refuse to name it while another thread uses the connection.
        self.socket: int | None = None

    def result(self, timeout: float) -> _T:
        self.connection.inc_thread_sharing()
        thread = threading.Thread(target=self._run, name="jobclaims health read", daemon=True)
        thread.start()
        if not self.done.wait(timeout):
            self._give_up(thread)
            raise HealthTimeout(
                f"the claims database did not answer the health reads within {timeout:g} "
                "seconds (JOBCLAIMS['HEALTH_TIMEOUT'])"
            )
        self.connection.dec_thread_sharing()
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # Set: the read returned.

    def _run(self) -> None:
        connections[self.alias] = self.connection
        try:
            self.connection.ensure_connection()
            self.socket = _socket_of(self.connection)
            self.value = self.read()
        except BaseException as error:
            self.error = error
        finally:
            # The shared connection is the caller's; any other this thread
            # opened is its own, and ends with it.
            del connections[self.alias]
            for other in connections.all(initialized_only=True):
                with suppress(DatabaseError):
                    other.close()
            with self.lock:
                self.done.set()
                abandoned = self.abandoned
            if abandoned:
                self._close_late()

    def _give_up(self, thread: threading.Thread) -> None:
        """Cut the late read off, and leave this thread a connection it can use."""
        _shut(self.connection, self.socket)
        self.done.wait(CUT_OFF_WITHIN)
        with self.lock:
            if self.done.is_set():
                self.connection.dec_thread_sharing()
                with suppress(DatabaseError):
                    # In a transaction, Django rolls back at its end instead.
                    self.connection.close()
                return
            self.abandoned = True
        with _late_lock:
            _late.add(self)  # type: ignore[arg-type]
        if not self.connection.in_atomic_block:
            # Still connecting: the next query here opens a connection of its own.
            del connections[self.alias]

    def _close_late(self) -> None:
        with suppress(DatabaseError):
            self.connection.close()
        self.connection.dec_thread_sharing()
        with _late_lock:
            _late.discard(self)  # type: ignore[arg-type]


def _socket_of(connection: BaseDatabaseWrapper) -> int | None:
    """The socket of ``connection``, if it talks to a server over one."""
    if connection.vendor == "sqlite":
        return None
    try:
        # psycopg, psycopg2 and mysqlclient all name it.
        return int(connection.connection.fileno())
    except Exception:  # A driver that does not: the read is cut off when it returns.
        return None


def _shut(connection: BaseDatabaseWrapper, descriptor: int | None) -> None:
    """Make whatever ``connection`` waits for fail at once: its socket shut
    (a blocked read returns), or SQLite's query interrupted."""
    if connection.vendor == "sqlite":
        if connection.connection is not None:
            connection.connection.interrupt()
        return
    if descriptor is None:
        return  # Not connected yet: nothing to shut.
    with suppress(OSError), socket.socket(fileno=os.dup(descriptor)) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)
