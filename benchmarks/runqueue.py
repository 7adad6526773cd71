"""A statement's time less the time its threads queued for a CPU.

With more busy processes than CPUs, a claim's wall-clock time includes time
its threads were ready to run but queued for a CPU, whatever the database
does. Linux counts that time per thread: the second field of
``/proc/<pid>/task/<tid>/schedstat`` (``run_delay``, in nanoseconds). A
claim runs on two threads, the client's and the database server's thread
serving its connection (SQLite runs in the client's thread), so the claim's
wall-clock time less both threads' ``run_delay`` over the claim is the time
it spent running or blocked: on a lock, the disk, the network. A loser that
waits for the winner's transaction still shows that wait.

The server's wait counts only up to the time the client slept, waiting
for it: the two threads can queue at the same instant (the client
preempted after sending, the server not yet run), and the plain sum
counts that instant twice; on this machine it sometimes went below zero.
"""

from __future__ import annotations

import os
from pathlib import Path
from time import perf_counter_ns, thread_time_ns

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

_CLIENT = Path("/proc/thread-self/schedstat")
#: The statement that names the server thread serving the connection.
_SERVER_THREAD = {
    # A backend is a single-threaded process of its own.
    "postgresql": "SELECT pg_backend_pid()",
    # A thread pool would hand the connection from thread to thread.
    "mysql": "SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()"
    " AND @@thread_handling = 'one-thread-per-connection'",
}
#: The process names a server thread must belong to, or it is not the server's.
_SERVERS = {"postgresql": {"postgres"}, "mysql": {"mariadbd", "mysqld"}}


class RunQueue:
    """The run-queue waits of a connection's client thread and server thread.

    Create it in the thread that runs the claims: it opens that thread's
    accounting, and the server thread's, once and keeps them open, so a
    reading costs a few microseconds and no round trip.

    The figures are ``None`` where a thread's accounting cannot be read: no
    ``/proc``, a server on another machine (or behind a pooler, which this
    cannot detect: connect directly), or a MariaDB whose threads serve many
    connections. They are then reported as unavailable.
    """

    def __init__(self, connection: BaseDatabaseWrapper):
        try:  # No /proc, or no such thread on this machine.
            paths = _threads(connection)
            self._files = None if paths is None else [os.open(path, os.O_RDONLY) for path in paths]
        except OSError:
            self._files = None

    def timed(self) -> Timed:
        """A timer for one claim, that also takes the CPU queueing out."""
        return Timed(self)

    def read(self) -> tuple[int, int, int] | None:
        """This thread's CPU time, its run-queue wait and the server's, so far (ns)."""
        if self._files is None:
            return None
        try:
            waits = [int(os.pread(file, 100, 0).split()[1]) for file in self._files]
        except OSError:  # The server thread has gone: the connection closed.
            return None
        # The schedstat CPU time of a running thread lags by up to a tick;
        # SQLite has no server thread.
        return thread_time_ns(), waits[0], sum(waits[1:])


class Timed:
    """The wall-clock time of a block, and the same less its CPU queueing.

    The readings are taken inside the timed span, never around it: reading
    is a system call, on whose return the kernel may preempt the thread, and
    the wait that follows is credited before the next reading. Inside, every
    wait the readings see lies within the span.
    """

    def __init__(self, queue: RunQueue):
        self._queue = queue
        self.start = self.wall = 0
        #: ``None`` where the run queues cannot be read.
        self.excluding_queue: int | None = None

    def __enter__(self) -> Timed:
        self.start = perf_counter_ns()
        self._before = self._queue.read()
        return self

    def __exit__(self, *exc_info: object) -> None:
        after = self._queue.read()
        self.wall = perf_counter_ns() - self.start
        if self._before is None or after is None:
            return
        cpu, client, server = (a - b for a, b in zip(after, self._before, strict=True))
        asleep = max(self.wall - cpu - client, 0)
        self.excluding_queue = self.wall - client - min(server, asleep)


def _threads(connection: BaseDatabaseWrapper) -> list[Path] | None:
    """The schedstat files of the threads a claim on ``connection`` runs on."""
    if connection.vendor == "sqlite":
        return [_CLIENT]
    try:
        with connection.cursor() as cursor:
            cursor.execute(_SERVER_THREAD[connection.vendor])
            row = cursor.fetchone()
    except (KeyError, DatabaseError):  # Another backend; MySQL has no TID column.
        return None
    if row is None:
        return None
    tid = row[0]
    status = Path(f"/proc/{tid}/status").read_text()
    pid = next(line.split()[1] for line in status.splitlines() if line.startswith("Tgid:"))
    name = Path(f"/proc/{pid}/comm").read_text().strip()
    if name not in _SERVERS[connection.vendor]:
        return None
    return [_CLIENT, Path(f"/proc/{pid}/task/{tid}/schedstat")]
