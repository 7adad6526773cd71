"""The interval of time a claim's window covers, and the rule that runs each once.

A key names a window, but two keys can name the same time: a deploy that
writes ``"hourly"`` for ``timedelta(hours=1)``, or removes a scheduled job's
``window = "daily"`` line so that its fires are keyed by their own time. The
unique constraint on ``(job, window)`` cannot see that. So each claim records
its slot, ``[slot_start, slot_end)``, and a claim is refused (reason
``slot-ran``) while another window of the job whose slot overlaps it has
succeeded or is still held. A window's slot is the window itself; a fire's,
when the job's keys are its fires, is the second it names.

Claims with no schedule name (``JobRun.objects.claim()`` without one) record
no slot and are not compared.
"""

from __future__ import annotations

import datetime

from django.db.models import Q, QuerySet

from jobclaims import wall_times
from jobclaims.claims.rule import Status
from jobclaims.clock import DatabaseNow
from jobclaims.windows import CalendarWindow, FixedWindow, from_name

Slot = tuple[datetime.datetime, datetime.datetime]

#: A fire's slot: the second its key names.
FIRE = datetime.timedelta(seconds=1)


def bounds(schedule: str, key: str) -> Slot | None:
    """The slot of the window ``key`` of a job whose windows ``schedule`` cuts.

    ``schedule`` is what a claim records: a window's name ("hourly",
    "3600-second") or a cron expression, whose keys are fire times.
    ``None`` when there is no schedule, or the key does not parse.
    """
    if not schedule:
        return None
    try:
        window = from_name(schedule)
    except ValueError:
        window = None
    try:
        if window is None:
            start = wall_times.parse(key)
            return start, start + FIRE
        start = window.start_of(key)
    except ValueError:
        return None
    return start, _end(window, key, start)


def _end(
    window: CalendarWindow | FixedWindow, key: str, start: datetime.datetime
) -> datetime.datetime:
    """Where the window ``key`` ends: the start of the next one."""
    if isinstance(window, FixedWindow):
        return start + window.size
    # Step by the hour (a local day is 23 to 25 of them) until the key changes.
    step = datetime.timedelta(minutes=1 if window.name == "minutely" else 60)
    moment = start + step
    while window.key_at(moment) == key:
        moment += step
    return window.start_of(window.key_at(moment))


def ran(runs: QuerySet, job: str, window: str, slot: Slot) -> QuerySet:
    """``job``'s runs of other windows whose slot overlaps ``slot`` and that
    succeeded or are still held: each refuses a claim of ``slot``.

    The (job, slot_end) index finds them.
    """
    start, end = slot
    held = Q(status=Status.RUNNING, expires_at__gt=DatabaseNow())
    return (
        runs.filter(job=job, slot_end__gt=start, slot_start__lt=end)
        .exclude(window=window)
        .filter(held | Q(status=Status.SUCCEEDED))
    )
