"""The libraries a team might use instead, timed in the rounds of the floor.

Each peer is timed doing what a claim + release does for jobclaims: make
sure one slot's work starts once, then record that it ended. A peer runs
only where it is installed (``pip install -e ".[bench]"``) and its database
is the one measured; elsewhere it is left out of the table, and said so.

- **procrastinate** (PostgreSQL): a periodic task's fire is claimed by
  ``procrastinate_defer_periodic_job_v2``, which inserts the fire's row
  unless its (task, periodic id, timestamp) is taken and defers the job in
  the same call; its worker records the end with
  ``procrastinate_finish_job_v1``. Timed with procrastinate's own schema and
  statements, through the driver's own cursor, as the floor is: its
  asynchronous Python layer is left out, which flatters it. A second row
  adds the worker's ``fetch_job`` between them, as a fire that runs does.
- **django-db-mutex**: ``with db_mutex(lock_id)``, through its own API.
  It is timed, but is no correct peer for a window: its release deletes
  the lock, so a second copy that starts after the first ended runs the
  window again, and its expiry is judged by the app server's clock.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from time import perf_counter_ns, thread_time_ns

from django.apps import apps
from django.db.backends.base.base import BaseDatabaseWrapper

from benchmarks.timing import Cycle, verb
from benchmarks.uncontended import statements_of

#: Numbers the peers' slots and locks, so each cycle's is new.
_slots = itertools.count()


@dataclass(frozen=True)
class Peer:
    """A peer's timed cycle, the statements it sends, and whether it gives
    what a claim gives: one run per slot, on the database's clock."""

    cycle: Cycle
    statements: list[str]
    correct: bool
    #: Why it is, or is not, a correct peer.
    why: str


def peers(connection: BaseDatabaseWrapper) -> dict[str, Peer]:
    """The peers installed here that run on ``connection``'s database."""
    found: dict[str, Peer] = {}
    if connection.vendor == "postgresql" and _installed("procrastinate"):
        found.update(_procrastinate(connection))
    if apps.is_installed("db_mutex"):
        found["django-db-mutex: with db_mutex()"] = _db_mutex(connection)
    return found


def missing(connection: BaseDatabaseWrapper) -> list[str]:
    """The peers this run leaves out, and why, for the table."""
    left_out = []
    if connection.vendor != "postgresql":
        left_out.append("procrastinate (PostgreSQL only)")
    elif not _installed("procrastinate"):
        left_out.append('procrastinate (not installed: pip install -e ".[bench]")')
    if not apps.is_installed("db_mutex"):
        left_out.append('django-db-mutex (not installed: pip install -e ".[bench]")')
    return left_out


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def _procrastinate(connection: BaseDatabaseWrapper) -> dict[str, Peer]:
    from procrastinate.schema import SchemaManager
    from procrastinate.sql import queries

    connection.ensure_connection()
    cursor = connection.connection.cursor()
    cursor.execute(SchemaManager.get_schema())
    connection.connection.commit()
    defer, fetch, finish = (
        queries["defer_periodic_job"],
        queries["fetch_job"],
        queries["finish_job"],
    )

    def deferred() -> int:
        cursor.execute(
            defer,
            {
                "queue": "default",
                "lock": None,
                "queueing_lock": None,
                "task_name": "bench",
                "priority": 0,
                "periodic_id": "",
                "defer_timestamp": next(_slots),
                "args": json.dumps({}),
            },
        )
        (job_id,) = cursor.fetchone()
        if job_id is None:
            raise RuntimeError("procrastinate refused the deferral of a new fire")
        return int(job_id)

    def finished(job_id: int) -> None:
        cursor.execute(finish, {"job_id": job_id, "status": "succeeded", "delete_job": False})

    def defer_and_finish() -> dict[str, int]:
        cpu, start = thread_time_ns(), perf_counter_ns()
        finished(deferred())
        return {"cycle": perf_counter_ns() - start, "cpu": thread_time_ns() - cpu}

    def defer_fetch_and_finish() -> dict[str, int]:
        cpu, start = thread_time_ns(), perf_counter_ns()
        job_id = deferred()
        cursor.execute(fetch, {"queues": None, "worker_id": None})
        if cursor.fetchone()[0] != job_id:
            raise RuntimeError("procrastinate's worker fetched another job than the fire's")
        finished(job_id)
        return {"cycle": perf_counter_ns() - start, "cpu": thread_time_ns() - cpu}

    why = "its fire's row is unique on (task, periodic id, timestamp): one job per fire"
    return {
        "procrastinate: defer + finish": Peer(
            defer_and_finish, [verb(defer), verb(finish)], True, why
        ),
        "procrastinate: defer + fetch + finish": Peer(
            defer_fetch_and_finish, [verb(defer), verb(fetch), verb(finish)], True, why
        ),
    }


def _db_mutex(connection: BaseDatabaseWrapper) -> Peer:
    from db_mutex.db_mutex import db_mutex

    def locked_and_unlocked() -> dict[str, int]:
        lock = db_mutex(f"bench-{next(_slots)}")
        cpu, start = thread_time_ns(), perf_counter_ns()
        with lock:
            pass
        return {"cycle": perf_counter_ns() - start, "cpu": thread_time_ns() - cpu}

    return Peer(
        locked_and_unlocked,
        statements_of(connection, locked_and_unlocked),
        False,
        "its release deletes the lock, so a copy started after the first ended "
        "runs the slot again; its expiry reads the app server's clock",
    )
