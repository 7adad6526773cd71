"""Which database errors mean "try again", and how long a claim keeps trying.

Under contention a database may end a statement, or a whole transaction,
with nothing written and a request to do the work again: a deadlock between
two contenders (MariaDB 1213, PostgreSQL 40P01), a serialization failure
under REPEATABLE READ or SERIALIZABLE (40001; on a Galera cluster a
certification conflict, also 1213), or a lock wait that ran out (1205,
55P03; SQLite's "database is locked"). None of them says who won, so a
claim answers them by starting again from a fresh read of what committed.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from django.db import DatabaseError

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

T = TypeVar("T")

#: How long a claim keeps trying before it gives up with the last error.
#: A contender's transaction lasts milliseconds; SQLite waits 5 s for its
#: write lock before it says "database is locked", so this allows two waits.
RETRY_FOR = 12.0

#: PostgreSQL's SQLSTATEs for deadlock_detected, serialization_failure and
#: lock_not_available.
_POSTGRESQL = frozenset({"40P01", "40001", "55P03"})
#: MariaDB's ER_LOCK_DEADLOCK (also a Galera certification conflict) and
#: ER_LOCK_WAIT_TIMEOUT (also a Galera node that cannot catch up for a causal
#: read), and ER_UNKNOWN_COM_ERROR, which a Galera node outside the cluster's
#: primary component answers to everything ("WSREP has not yet prepared node
#: for application use") until it rejoins, often within seconds.
_MYSQL = frozenset({1213, 1205, 1047})
#: SQLite's SQLITE_BUSY and SQLITE_LOCKED (named in sqlite3 from Python 3.11).
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def is_transient(error: DatabaseError) -> bool:
    """Whether ``error`` asks for the work to be tried again, from the driver's code."""
    cause = error.__cause__
    if cause is None:
        return False
    # psycopg (3) and psycopg2 name the SQLSTATE differently.
    sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if sqlstate is not None:
        return sqlstate in _POSTGRESQL
    if isinstance(cause, sqlite3.Error):
        return _sqlite_code(cause) in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return bool(cause.args) and cause.args[0] in _MYSQL


def _sqlite_code(error: sqlite3.Error) -> int | None:
    """SQLite's primary result code; Python 3.10 only gives the message."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF
    message = str(error)
    if "database is locked" in message:
        return _SQLITE_BUSY
    if "database table is locked" in message:
        return _SQLITE_LOCKED
    return None


def pauses() -> Iterator[float]:
    """Pauses to sleep between tries, until ``RETRY_FOR`` seconds have passed.

    Each is drawn at random below a ceiling that doubles from 5 ms to 200 ms,
    so contenders that failed together do not try again together.
    """
    deadline = time.monotonic() + RETRY_FOR
    ceiling = 0.005
    while time.monotonic() < deadline:
        yield random.uniform(0, ceiling)
        ceiling = min(2 * ceiling, 0.2)


def retrying(connection: BaseDatabaseWrapper, statement: Callable[[], T]) -> T:
    """Run ``statement`` again while it fails with a transient error.

    For one compare-and-set statement that commits on its own: a failed try
    wrote nothing, and the next restates its conditions. Inside a
    transaction the error is raised, since it may have ended that
    transaction; after ``RETRY_FOR`` seconds, the last error is.
    """
    waits = pauses()
    while True:
        try:
            return statement()
        except DatabaseError as error:
            pause = next(waits, None)
            if connection.in_atomic_block or not is_transient(error) or pause is None:
                raise
        time.sleep(pause)
