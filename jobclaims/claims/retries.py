"""Which database errors mean "try again", and how long a claim keeps trying.

Under contention a database may end a statement, or a whole transaction,
with nothing written and a request to do the work again: a deadlock between
two contenders (MariaDB 1213, PostgreSQL 40P01), a serialization failure
under REPEATABLE READ or SERIALIZABLE (40001; on a Galera cluster a
certification conflict, also 1213), or a lock wait that ran out (1205,
55P03; SQLite's "database is locked"). None of them says who won, so a
claim answers them by starting again from a fresh read of what committed.

A cluster's faults end the connection itself: the server went away or
cannot be reached (MariaDB 2002, 2003, 2006, 2013; PostgreSQL's 08 class, a
connection refused or closed before any SQLSTATE), it was shut down under
the session (57P01-57P03), or the node left the cluster's primary component
(1047, and 1180 when that happens during a COMMIT). Those are tried again
from a fresh connection (``is_disconnect()``): the statement may have
committed before the answer was lost, which the claim settles by looking
for its own token before it tries again.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from django.db import DatabaseError

from jobclaims.claims.backends import mysql, postgresql, sqlite

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

T = TypeVar("T")

#: How long a claim keeps trying before it gives up with the last error.
#: A contender's transaction lasts milliseconds; SQLite waits 5 s for its
#: write lock before it says "database is locked", so this allows two waits.
RETRY_FOR = 12.0

# Each backend's codes sit beside its statements, in jobclaims/claims/.


def is_transient(error: DatabaseError) -> bool:
    """Whether ``error`` asks for the work to be tried again, from the driver's code.

    A lost connection does too (``is_disconnect()``), from a fresh one.
    """
    cause = error.__cause__
    if cause is None:
        return False
    if is_disconnect(error):
        return True
    sqlstate = postgresql.sqlstate(cause)
    if sqlstate is not None:
        return sqlstate in postgresql.TRANSIENT
    if isinstance(cause, sqlite3.Error):
        return _sqlite_code(cause) in (sqlite.BUSY, sqlite.LOCKED)
    return bool(cause.args) and cause.args[0] in mysql.TRANSIENT


def is_disconnect(error: DatabaseError) -> bool:
    """Whether ``error`` ended the connection, or says the server cannot take work.

    psycopg gives no SQLSTATE for a connection that was refused, timed out
    or closed by the server: its ``OperationalError`` without one, or a
    subclass of it (psycopg 3's ``ConnectionTimeout``, "connection timeout
    expired"), is always about the connection, never about a statement.
    """
    cause = error.__cause__
    if cause is None or isinstance(cause, sqlite3.Error):
        return False
    sqlstate = postgresql.sqlstate(cause)
    if sqlstate is not None:
        return sqlstate.startswith("08") or sqlstate in postgresql.DISCONNECTS
    if type(cause).__module__.startswith("psycopg"):
        return any(
            kind.__module__.startswith("psycopg")
            and kind.__name__ in ("OperationalError", "InterfaceError")
            for kind in type(cause).__mro__
        )
    return bool(cause.args) and cause.args[0] in mysql.DISCONNECTS


def is_cancelled(error: DatabaseError) -> bool:
    """Whether ``error`` is PostgreSQL's query_canceled (57014).

    The standby watchdog's cancel request arrives when it arrives: one sent
    as a wait ended anyway lands on the next statement, which wrote nothing.
    """
    cause = error.__cause__
    return cause is not None and postgresql.sqlstate(cause) == "57014"


def summary(error: DatabaseError) -> str:
    """A database error on one line, as a one-line message quotes it: the
    drivers' messages span lines ("Is the server running on that host...")."""
    return " ".join(str(error).split())[:200] or type(error).__name__


def reconnect_after(connection: BaseDatabaseWrapper, error: DatabaseError) -> None:
    """Drop ``connection`` after an error that ended it, so the next try opens
    a fresh one; Django would otherwise keep using the broken one."""
    if is_disconnect(error) and not connection.in_atomic_block:
        # Closing a dead socket may fail; Django forgets the connection anyway.
        with contextlib.suppress(DatabaseError):
            connection.close()


def _sqlite_code(error: sqlite3.Error) -> int | None:
    """SQLite's primary result code; Python 3.10 only gives the message."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF
    message = str(error)
    if "database is locked" in message:
        return sqlite.BUSY
    if "database table is locked" in message:
        return sqlite.LOCKED
    return None


def pauses(retry_for: float = RETRY_FOR) -> Iterator[float]:
    """Pauses to sleep between tries, until ``retry_for`` seconds have passed.

    Each is drawn at random below a ceiling that doubles from 5 ms to 200 ms,
    so contenders that failed together do not try again together.
    """
    deadline = time.monotonic() + retry_for
    ceiling = 0.005
    while time.monotonic() < deadline:
        yield random.uniform(0, ceiling)
        ceiling = min(2 * ceiling, 0.2)


def retrying(
    connection: BaseDatabaseWrapper, statement: Callable[[], T], retry_for: float = RETRY_FOR
) -> T:
    """Run ``statement`` again while it fails with a transient error.

    For one compare-and-set statement that commits on its own, or one whole
    transaction (an operator's schedule edit): a failed try wrote nothing
    (or, when the connection was lost, perhaps committed, and the next
    try's conditions find it done), and the next restates its conditions.
    Inside a transaction the error is raised, since it may have
    ended that transaction; after ``retry_for`` seconds, the last error is.
    """
    waits = pauses(retry_for)
    while True:
        try:
            return statement()
        except DatabaseError as error:
            pause = next(waits, None)
            if connection.in_atomic_block or not is_transient(error) or pause is None:
                raise
            reconnect_after(connection, error)
        time.sleep(pause)
