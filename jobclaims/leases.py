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

``--lease``, ``JobRun.objects.claim()``, ``claim()``, ``@claimed``,
``JobCommand.lease`` and ``JOBCLAIMS["DEFAULT_LEASE"]`` all refuse a lease
this module calls wrong, before anything is written.
"""

from __future__ import annotations

import datetime

#: The longest lease a claim may take.
MAX_LEASE = datetime.timedelta(days=366)

#: What to write instead, in every message about a lease that is too long.
ADVICE = (
    "the heartbeat renews a lease while its job runs, so it only needs to "
    "outlast a pause in renewing; give a shorter one, such as 30 minutes"
)


def problem(lease: object) -> str:
    """What is wrong with ``lease`` as a claim's lease, or "" when it is fine.

    The sentence follows the name of what was given: ``f"lease {problem}"``.
    """
    if not isinstance(lease, datetime.timedelta) or lease <= datetime.timedelta():
        return f"must be a positive datetime.timedelta, not {lease!r}"
    if lease > MAX_LEASE:
        return f"is {lease}, longer than the {MAX_LEASE.days} days a lease may last; {ADVICE}"
    return ""
