"""How a job's time is cut into slots: the key of each, and the interval it covers.

A slot is the stretch of time one run of a job is for, named by its key: two
instances that compute the same key compete for the same run, and the unique
constraint on ``(job, window)`` lets one of them have it. ``Slots`` computes
every key, for a moment, for now by the database clock
(``jobclaims.jobs.claiming.slot_key()``) or for an operator's ``--window``: a
``JobCommand`` and ``jobclaims_run`` ask their job's
(``jobclaims.jobs.commands.slots_of()``), the scheduler and health a schedule's
(``JobSchedule.slots``), ``claim()``, ``@claimed`` and a Celery task those
their ``window`` cuts, and a claim those its ``schedule`` names. A job's
window (``jobclaims.time.windows``) cuts its time into calendar windows or fixed
buckets; a scheduled job's fires (``jobclaims.time.cron``) each open a slot, the
second the fire names, or with a declared window too, the window the fire
falls in.

A key names a slot, but two keys can name the same time: a deploy that
writes ``"hourly"`` for ``timedelta(hours=1)``, or removes a scheduled job's
``window = "daily"`` line so that its fires are keyed by their own time. The
unique constraint on ``(job, window)`` cannot see that. So each claim records
its slot, ``[slot_start, slot_end)``, and a claim is refused (reason
``slot-ran``) while another window of the job whose slot overlaps it has
succeeded or is still held: the claim's statements ask, written whole in
each backend of ``jobclaims.claims.backends`` (``PAUSE_OR_SLOT_RUN``, and on
PostgreSQL its INSERT), with ``PAUSE_OR_SLOT_SUCCEEDED`` after the INSERT.

Claims with no schedule name (``JobRun.objects.claim()`` without one) record
no slot and are not compared.
"""

from __future__ import annotations

import datetime
import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from jobclaims.time import wall_times
from jobclaims.time.fire_times import FireTimes
from jobclaims.time.wall_times import named_zone
from jobclaims.time.windows import CalendarWindow, FixedWindow, WindowSpec, from_name, resolve

Slot = tuple[datetime.datetime, datetime.datetime]

#: A fire's slot: the second its key names.
FIRE = datetime.timedelta(seconds=1)
MICROSECOND = datetime.timedelta(microseconds=1)


@dataclass(frozen=True)
class Slots:
    """How one job's time is cut into slots, and the key of each.

    With a ``window`` alone, a moment's slot is the window holding it. With
    a ``cron`` schedule, each fire opens a slot, keyed by the fire's own time,
    or by the window it falls in when there is a ``window`` too. With
    neither, the slots are fires of a schedule known only by the name its
    claims recorded (``recorded()``): they can be bounded, not listed.
    """

    #: The window whose keys the slots have; None: a fire's key is its own time.
    window: CalendarWindow | FixedWindow | None = None
    #: The schedule whose fires open the slots; None: the window holds each moment.
    cron: FireTimes | None = None

    @classmethod
    def of_window(cls, spec: WindowSpec) -> Slots:
        """The slots a job's ``window`` cuts, or ``ValueError`` naming the fix."""
        return cls(resolve(spec))

    @classmethod
    def recorded(cls, schedule: str) -> Slots:
        """The slots of a claim that recorded ``schedule`` (``recorded_schedule``):
        those of the window it names, else fires keyed by their own time."""
        try:
            return cls(from_name(schedule))
        except ValueError:
            return cls()

    @property
    def recorded_schedule(self) -> str:
        """What a claim records in its ``schedule`` column: the window's name,
        else the cron expression."""
        if self.window is not None:
            return self.window.name
        expression = self._fires.expression
        # The column holds 32 characters; longer expressions are not named.
        return expression if len(expression) <= 32 else "cron"

    def key_at(self, moment: datetime.datetime) -> str:
        """The key of the slot ``moment`` is in; with a schedule, ``moment`` is a fire."""
        if self.window is not None:
            return self.window.key_at(moment)
        return self._fires.key(moment)

    def key_for(self, text: str) -> str:
        """The key of the slot an operator's ``--window`` names, or
        ``ValueError`` naming the fix; with a schedule, the fire it names
        (``FireTimes.fire_for()``)."""
        if self.cron is None and self.window is not None:
            return self.window.key_for(text)
        return self.key_at(self._fires.fire_for(text))

    def moment(self, text: str) -> datetime.datetime:
        """An operator's ``--from`` or ``--to``: a date or date-time read where
        ``--window`` is (``key_for()``), in the schedule's zone, else in
        ``TIME_ZONE``; ``ValueError`` naming the fix."""
        if self.cron is None or self.cron.time_zone is None:
            return wall_times.parse(text)
        return wall_times.parse(text, named_zone(self.cron.time_zone))

    def current_key(self, now: datetime.datetime) -> str:
        """The key of the slot due at ``now``: the window holding it, or the
        schedule's latest fire at or before it (``ValueError`` if none)."""
        if self.cron is None:
            return self.key_at(now)
        fire = self.cron.latest_fire(now)
        if fire is None:
            raise ValueError("its schedule has no fire time before now")
        return self.key_at(fire)

    def fires_between(
        self, start: datetime.datetime, end: datetime.datetime
    ) -> list[tuple[datetime.datetime, str]]:
        """Each fire after ``start`` up to ``end``, with the key it claims."""
        return [(fire, self.key_at(fire)) for fire in self._fires.fires_between(start, end)]

    def through(
        self, start: datetime.datetime, end: datetime.datetime
    ) -> Iterator[tuple[datetime.datetime, str]]:
        """Keys of the slots from ``start`` through ``end``, oldest first, each
        once (the windows holding both and those between, or the fires from
        ``start`` to ``end``, both included), each with a moment of its slot
        in the range: where a range that ends or begins there takes it in.
        Read as they are asked for, so that a long range costs only the keys
        that are read."""
        if self.cron is None and self.window is not None:
            return self.window.through(start, end)
        fires = itertools.takewhile(
            lambda fire: fire <= end, self._fires.fires_after(start - MICROSECOND)
        )
        # Fires keyed by a window: each window's key once, with its first fire.
        keyed = itertools.groupby(((fire, self.key_at(fire)) for fire in fires), lambda it: it[1])
        return (next(group) for _key, group in keyed)

    def start_of(self, key: str) -> datetime.datetime:
        """When the slot ``key`` names begins, or ``ValueError`` if it names none."""
        if self.window is not None:
            return self.window.start_of(key)
        return wall_times.parse(key)

    def bounds(self, key: str) -> Slot:
        """The slot ``key`` names, ``[start, end)``, or ``ValueError`` if it names none."""
        start = self.start_of(key)
        if self.window is None:
            return start, start + FIRE
        return start, self.window.end_of(key, start)

    @property
    def _fires(self) -> FireTimes:
        assert self.cron is not None, "the slots of a recorded schedule have no fire times"
        return self.cron


def bounds(schedule: str, key: str) -> Slot | None:
    """The slot of the window ``key`` of a job whose windows ``schedule`` cuts.

    ``schedule`` is what a claim records (``Slots.recorded()``): a window's
    name ("hourly", "3600-second") or a cron expression, whose keys are fire
    times. ``None`` when there is no schedule, or the key does not parse.

    Every claim that records a slot asks, most of them for the few slots
    due now: the answers are kept, by ``TIME_ZONE`` too, since the zone
    alone decides where a key's slot lies. Worked out, one costs a claim
    more CPU (11 us) than the rest of the claim's own arithmetic.
    """
    if not schedule:
        return None
    return _bounds(schedule, key, wall_times.project_zone())


@functools.lru_cache(maxsize=1024)
def _bounds(schedule: str, key: str, zone: datetime.tzinfo) -> Slot | None:
    """``bounds()`` in ``zone``, the project's."""
    try:
        return Slots.recorded(schedule).bounds(key)
    except ValueError:
        return None
