"""What every kind of schedule answers: its fire times, in its zone, and the key of each.

A schedule is a cron expression (``jobclaims.time.cron``) or a fixed
interval (``jobclaims.time.intervals``); ``jobclaims.time.expressions``
reads an expression as its kind. The scheduler, the slots, the checks and
the operators' views ask each the same questions, answered here where the
answer is the same for every kind.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

from jobclaims.time import wall_times
from jobclaims.time.wall_times import UTC, named_zone

MICROSECOND = datetime.timedelta(microseconds=1)


class FireTimes:
    """The fire times of a schedule ``expression`` read in ``time_zone``
    (None: the project's ``TIME_ZONE``). Each fire is an instant; its key is
    its wall time in the zone, with the offset, so each instant has one."""

    expression: str
    time_zone: str | None

    @property
    def fires(self) -> str:
        """What decides the fire times, whatever the spelling: two spellings
        of the same fires are one text (``ScheduleVersion``'s fingerprint)."""
        raise NotImplementedError

    def describe(self) -> str:
        """The schedule in words, for the operators' views."""
        raise NotImplementedError

    def fires_after(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times after ``moment``, soonest first, in UTC."""
        raise NotImplementedError

    def fires_before(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times at or before ``moment``, latest first, in UTC."""
        raise NotImplementedError

    def latest_fire(self, moment: datetime.datetime) -> datetime.datetime | None:
        """The most recent fire time at or before ``moment``."""
        return next(self.fires_before(moment), None)

    def next_fire(self, moment: datetime.datetime) -> datetime.datetime | None:
        """The first fire time after ``moment``."""
        return next(self.fires_after(moment), None)

    @property
    def at_set_local_times(self) -> bool:
        """Whether a fire that a spring-forward change skips moves to the
        change, bringing two fires nearer than their wall times say."""
        return False

    def shortest_gap(self) -> tuple[datetime.datetime, datetime.datetime]:
        """Two consecutive fires as close as any two ever are."""
        raise NotImplementedError

    @property
    def zone_name(self) -> str:
        """The name of the zone its fires are wall times in."""
        return self.time_zone or wall_times.project_zone_name()

    def local(self, moment: datetime.datetime) -> datetime.datetime:
        """``moment`` in the schedule's zone, by way of UTC."""
        if self.time_zone is None:
            return wall_times.local(moment)
        return moment.astimezone(UTC).astimezone(named_zone(self.time_zone))

    def fires_between(
        self, start: datetime.datetime, end: datetime.datetime
    ) -> list[datetime.datetime]:
        """Fire times after ``start`` and at or before ``end``, oldest first."""
        fires = []
        for fire in self.fires_after(start):
            if fire > end:
                break
            fires.append(fire)
        return fires

    def key(self, fire: datetime.datetime) -> str:
        """The key of the window ``fire`` opens: its local time, with its offset."""
        return wall_times.canonical(self.local(fire))

    def fire_for(self, text: str) -> datetime.datetime:
        """The fire an operator's ``--window`` names.

        A date and time names the latest fire at or before it; a date alone,
        the day's first fire.
        """
        zone = None if self.time_zone is None else named_zone(self.time_zone)
        moment = wall_times.parse(text, zone)
        if "T" in text:
            fire = self.latest_fire(moment)
        else:
            fire = next(self.fires_after(moment - MICROSECOND), None)
            if fire is not None and self.local(fire).date() != self.local(moment).date():
                fire = None
        if fire is None:
            raise ValueError(f"{text!r} names no fire time of {self.expression!r}")
        return fire
