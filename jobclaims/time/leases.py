"""How long a lease may be: the one rule every way of giving a lease is held to.

A lease bounds how long a *crashed* run blocks its window, not how long a run
may take: while a job runs, the heartbeat renews its lease every third of it.
So a lease only needs to outlast a pause in renewing (a slow database, a
stalled host), and a long one only makes a crash block its job for longer.

``MAX_LEASE`` is 366 days: more than a year, ten times the longest calendar
window (a month), so no schedule needs more; and far from where an
``expires_at`` stops being a date every database stores and Django reads
back (``--lease 300000000000`` once wrote year 11533 on PostgreSQL and a zero
date on MariaDB, and ``--lease 1e300`` overflowed Python's ``timedelta``).

``MIN_LEASE`` is 100 ms: a run starts only while it knows a third of its
lease is left once its claim returned, so a lease must outlast a round trip
to the database by that much (``claim_lease=timedelta(microseconds=1)``
once made a Celery task that claimed every call and never ran one).

``--lease``, ``JobRun.objects.claim()``, ``claim()``, ``@claimed``,
``JobCommand.lease``, ``ClaimedTask.claim_lease`` and
``JOBCLAIMS["DEFAULT_LEASE"]`` all refuse a lease this module calls wrong,
before anything is written.

The same lease decides when a run may start, and when it is held on
(``held_for()``): a lease that a stalled commit returned late may already
belong to another instance, so a run starts, and keeps working, only while
it knows a renewal interval of its lease is left.
"""

from __future__ import annotations

import datetime
import time
from typing import cast

from jobclaims.time import durations

#: The longest lease a claim may take.
MAX_LEASE = datetime.timedelta(days=366)

#: The shortest: a run starts only while it knows a renewal interval (a
#: third) of its lease is left once its claim returned, and the heartbeat
#: must renew it within that. A shorter lease ends before a database's
#: round trip does, and its run could never start.
MIN_LEASE = datetime.timedelta(milliseconds=100)

#: What to write instead, in every message about a lease that is too long.
ADVICE = (
    "the heartbeat renews a lease while its job runs, so it only needs to "
    "outlast a pause in renewing; give a shorter one, such as 30 minutes"
)


def problem(lease: object) -> str:
    """What is wrong with ``lease`` as a claim's lease, or "" when it is fine.

    The sentence follows the name of what was given: ``f"lease {problem}"``.
    """
    if problem := durations.problem(lease):
        return problem
    if cast(datetime.timedelta, lease) > MAX_LEASE:
        return f"is {lease}, longer than the {MAX_LEASE.days} days a lease may last; {ADVICE}"
    if cast(datetime.timedelta, lease) < MIN_LEASE:
        return (
            f"is {lease}, shorter than the {MIN_LEASE.total_seconds():g} s a lease must last: "
            "a run starts only with a third of its lease left once its claim returned, "
            "which a shorter one never has"
        )
    return ""


#: How many times the heartbeat renews a lease within one lease: a live run
#: keeps its claim through two missed renewals.
RENEWALS_PER_LEASE = 3


def renewal_interval(lease: datetime.timedelta) -> float:
    """Seconds between two renewals of ``lease``; also the margin a run must
    know is left of its lease to start (see ``held_for()``)."""
    return lease.total_seconds() / RENEWALS_PER_LEASE


def clock() -> float:
    """This host's clock for measuring how long a statement took to return.

    Only durations are read from it, never moments, so hosts need not agree.
    On Linux it counts time the host spent suspended, which a stalled
    process must not miss.
    """
    return time.clock_gettime(_CLOCK)


_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def held_until(sent_at: float, length: datetime.timedelta) -> float:
    """Until when, on ``clock()``, a lease of ``length`` is surely held.

    ``sent_at`` is ``clock()`` just before the statement that set the lease
    was sent. The database set ``expires_at`` to its own time *then or
    later*, plus ``length``: however long the statement or its commit
    stalled, at least ``sent_at + length - clock()`` of the lease is left,
    by the database clock (the two clocks only need to run at one rate).
    """
    return sent_at + length.total_seconds()


def held_for(until: float | None) -> float:
    """Seconds of lease surely left, by ``held_until()``; 0 when unknown."""
    if until is None:
        return 0.0
    return max(until - clock(), 0.0)


def shortest_covering(stall: datetime.timedelta) -> datetime.timedelta:
    """The shortest lease whose claim still starts after a commit stalled ``stall``.

    A run starts with one renewal interval of its lease left, so the
    lease must be ``stall`` plus a third of itself: 1.5 times the stall.
    """
    return stall * RENEWALS_PER_LEASE / (RENEWALS_PER_LEASE - 1)
