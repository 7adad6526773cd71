"""Cron expressions: when a schedule fires, in which zone, and the key of each fire.

``CronSchedule("5 2 * * *")`` fires at those times in the project's
``TIME_ZONE`` (or in its own ``time_zone``). Fire times come from cronsim,
which follows Debian cron on daylight-saving days: a fire whose wall time a
spring-forward change skips runs once, at the change; one whose wall time a
fall-back change repeats runs once, at its first occurrence, while an hourly
or more frequent expression fires in both repeated hours, an hour apart.
Keys carry the UTC offset, so each fire is one instant with one key. Fields
mean what they mean to Vixie cron (``_as_cronsim``).
"""

from __future__ import annotations

import datetime
import itertools
import re
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass

from cronsim import CronSim, CronSimError
from django.utils import timezone

from jobclaims import wall_times
from jobclaims.wall_times import UTC

MICROSECOND = datetime.timedelta(microseconds=1)
SECOND = datetime.timedelta(seconds=1)

#: Vixie cron's nicknames, as the five fields each stands for.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

#: A one-value range with a step, like ``30-30/15``: Vixie cron reads it as
#: the one value, and cronsim as "30 and every 15th after" (see ``_as_cronsim``).
_ONE_VALUE_RANGE = re.compile(r"^(\w+)-(\w+)/\d+$")


@dataclass(frozen=True)
class CronSchedule:
    """A cron expression evaluated in the project's time zone.

    Five fields (minute to day of week), six with a leading seconds field,
    or one of Vixie cron's nicknames (``@daily``). Fields mean what they mean
    to Vixie cron, which cronsim follows but for one-value ranges with a step.
    ``time_zone`` names the zone it is evaluated in instead.
    """

    expression: str
    #: An IANA zone name ("America/New_York"); None: the project's ``TIME_ZONE``.
    time_zone: str | None = None

    def __post_init__(self) -> None:
        if self.time_zone is not None:
            named_zone(self.time_zone)
        _refuse_what_cron_would_not_run(self.expression)
        try:
            CronSim(self._cronsim, self.local(timezone.now()))
        except CronSimError as error:
            raise ValueError(
                f"schedule {self.expression!r} is not a cron expression ({error}); "
                "write it like '5 2 * * *' for 02:05 every day, with numbers, names (MON, "
                "JAN), ranges (1-5), steps (*/15, 0-30/10) and lists (1,15) in each field"
            ) from None

    @property
    def _cronsim(self) -> str:
        """The expression as cronsim reads it the way Vixie cron does."""
        fields = ALIASES.get(self.expression.strip().lower(), self.expression).split()
        names = [()] * (len(fields) - 2) + [_MONTHS, _WEEKDAYS]
        return " ".join(map(_as_cronsim, fields, names))

    def describe(self) -> str:
        """The schedule in words, like "At 02:05 every day"."""
        return str(CronSim(self._cronsim, self.local(timezone.now())).explain())

    @property
    def zone_name(self) -> str:
        """The name of the zone its fires are wall times in."""
        return self.time_zone or timezone.get_current_timezone_name()

    def local(self, moment: datetime.datetime) -> datetime.datetime:
        """``moment`` as cronsim needs it: in the schedule's zone, by way of UTC."""
        if self.time_zone is None:
            return wall_times.local(moment)
        return moment.astimezone(UTC).astimezone(named_zone(self.time_zone))

    # cronsim counts in whole seconds, and where a start has microseconds
    # its versions differ: 2.7 (the last for Python 3.10) drops them going
    # backwards, 2.8 does not. So each walk starts a whole second beyond
    # ``moment`` and drops the fires on the wrong side of it. ``moment`` is
    # compared in UTC: two datetimes in one zone compare by wall time, and a
    # local time a spring-forward change skips (02:30, read as 03:30) would
    # come before the 03:00 fire at the change.

    def fires_after(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times after ``moment``, soonest first, in UTC."""
        moment = moment.astimezone(UTC)
        start = self.local(moment.replace(microsecond=0) - SECOND)
        for fire in CronSim(self._cronsim, start):
            if fire > moment:
                yield fire.astimezone(UTC)

    def fires_before(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times at or before ``moment``, latest first, in UTC."""
        moment = moment.astimezone(UTC)
        start = self.local(moment.replace(microsecond=0) + SECOND)
        for fire in CronSim(self._cronsim, start, reverse=True):
            if fire <= moment:
                yield fire.astimezone(UTC)

    def latest_fire(self, moment: datetime.datetime) -> datetime.datetime | None:
        """The most recent fire time at or before ``moment``."""
        return next(self.fires_before(moment), None)

    def fires_between(
        self, start: datetime.datetime, end: datetime.datetime
    ) -> list[datetime.datetime]:
        """Fire times after ``start`` and at or before ``end``, oldest first."""
        return list(itertools.takewhile(lambda fire: fire <= end, self.fires_after(start)))

    def key(self, fire: datetime.datetime) -> str:
        """The key of the window ``fire`` opens: its local time, with its offset."""
        return wall_times.canonical(self.local(fire))

    @property
    def at_set_local_times(self) -> bool:
        """Whether cronsim moves a fire that a spring-forward change skips to
        the change, as Debian cron does: five fields, minute and hour without ``*``."""
        fields = self._cronsim.split()
        return len(fields) == 5 and not fields[0].startswith("*") and not fields[1].startswith("*")

    def shortest_gap(self) -> tuple[datetime.datetime, datetime.datetime]:
        """Two consecutive fires, as wall times, as close as any two ever are.

        Worked out from the fields, for all time: the closest two times of
        one day, and the closest two days of the Gregorian calendar's
        400-year cycle (146,097 days, a whole number of weeks, after which
        dates and weekdays repeat) with the last time of the first and the
        first time of the second.
        """
        walk = CronSim(self._cronsim, datetime.datetime(2000, 1, 1))
        times = sorted(
            datetime.time(hour, minute, second)
            for hour in walk.hours
            for minute in walk.minutes
            for second in walk.seconds
        )
        closest = min(itertools.pairwise(times), key=_seconds_apart, default=None)
        days = _closest_days(walk)
        across = (
            datetime.datetime.combine(days[0], times[-1]),
            datetime.datetime.combine(days[1], times[0]),
        )
        if closest is None or across[1] - across[0] <= _seconds_apart(closest) * SECOND:
            return across
        return (
            datetime.datetime.combine(days[0], closest[0]),
            datetime.datetime.combine(days[0], closest[1]),
        )

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


def _refuse_what_cron_would_not_run(expression: str) -> None:
    """Raise ``ValueError`` naming the fix for an expression of no fire times."""
    if expression.strip().lower() == "@reboot":
        raise ValueError(
            "schedule '@reboot' names no time: a scheduler starts jobs at fire times, "
            "and each host's scheduler restarts when it likes; start the command from "
            "the host's boot (a systemd unit) instead, or give a time like '@daily'"
        )
    fields = expression.lower().split()
    if not fields:
        raise ValueError(
            f"schedule {expression!r} is empty; write a cron expression like '5 2 * * *', "
            "or leave schedule None for a job that your own cron starts"
        )
    if len(fields) == 1 and fields[0].startswith("@") and fields[0] not in ALIASES:
        raise ValueError(
            f"schedule {expression!r} is not a cron nickname; use one of {', '.join(ALIASES)}"
        )
    if len(fields) not in (1, 5, 6) or (len(fields) == 1 and fields[0] not in ALIASES):
        raise ValueError(
            f"schedule {expression!r} has {len(fields)} fields; write five, "
            "minute hour day month weekday, like '5 2 * * *' (or six, with "
            "seconds first, or a nickname like '@daily')"
        )


def _as_cronsim(field: str, names: tuple[str, ...] = ()) -> str:
    """``field`` with each one-value range with a step (``30-30/15``) as its value."""
    terms = []
    for term in field.split(","):
        match = _ONE_VALUE_RANGE.match(term)
        if match and _value(match[1], names) == _value(match[2], names):
            term = match[1]
        terms.append(term)
    return ",".join(terms)


def _value(text: str, names: tuple[str, ...]) -> str:
    """A field's number or name, as the number it stands for (JAN: 1, SUN: 0)."""
    if text.upper() in names:
        return str(names.index(text.upper()))
    return str(int(text)) if text.isdigit() else text.upper()


#: Names in the month and day-of-week fields, at the index of their number.
_MONTHS = ("", "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


def _seconds_apart(times: tuple[datetime.time, datetime.time]) -> int:
    first, second = (time.hour * 3600 + time.minute * 60 + time.second for time in times)
    return second - first


#: After this many days dates and weekdays repeat: 400 Gregorian years.
_CALENDAR_CYCLE = 146_097


def _closest_days(walk: CronSim) -> tuple[datetime.date, datetime.date]:
    """The two consecutive fire days closest together in the calendar's cycle."""
    previous: datetime.date | None = None
    closest: tuple[datetime.date, datetime.date] | None = None
    day = datetime.date(2001, 1, 1)
    # One more cycle's worth of the first fire day closes the loop.
    for _ in range(_CALENDAR_CYCLE + 366 * 4):
        if day.month in walk.months and walk.match_day(day):
            if previous is not None and (
                closest is None or day - previous < closest[1] - closest[0]
            ):
                closest = (previous, day)
                if day - previous == datetime.timedelta(days=1):
                    break
            previous = day
        day += datetime.timedelta(days=1)
    assert closest is not None, "cronsim refuses an expression that never fires"
    return closest


def named_zone(name: str) -> zoneinfo.ZoneInfo:
    """The zone ``name`` names, or ``ValueError`` naming the fix."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(
            f"time_zone {name!r} is not a time zone of the tz database; give an IANA "
            "name like 'America/New_York' or 'Europe/Paris' (zoneinfo.available_timezones() "
            "lists them; install the tzdata package where the system has none), "
            "or None for TIME_ZONE"
        ) from None
