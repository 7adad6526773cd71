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
import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from cronsim import CronSim, CronSimError
from django.utils import timezone

from jobclaims.time.fire_times import FireTimes
from jobclaims.time.wall_times import UTC, named_zone

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
class CronSchedule(FireTimes):
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
            _parsed(self._cronsim)
        except CronSimError as error:
            raise ValueError(
                f"schedule {self.expression!r} is not a cron expression ({error}); "
                "write it like '5 2 * * *' for 02:05 every day, with numbers, names (MON, "
                "JAN), ranges (1-5), steps (*/15, 0-30/10) and lists (1,15) in each field"
            ) from None

    @functools.cached_property
    def _cronsim(self) -> str:
        """The expression as cronsim reads it the way Vixie cron does."""
        fields = ALIASES.get(self.expression.strip().lower(), self.expression).split()
        names = [()] * (len(fields) - 2) + [_MONTHS, _WEEKDAYS]
        return " ".join(map(_as_cronsim, fields, names))

    @functools.cached_property
    def fires(self) -> str:
        """What decides the fire times, whatever the spelling: each field's
        values as cron reads them, and the zone of its own (``time_zone``).

        ``*/3`` and ``0-59/3``, ``0 20 * * *`` and ``0 0 20 * * *``, ``@daily``
        and ``0 0 * * *``, a Sunday as 0 or 7: each pair is one text, so
        schedules written two ways compare equal; ``*/3`` and ``*/4`` do not.
        """
        parsed = _parsed(self._cronsim)
        days: set[object] = set(parsed.days)
        weekdays = {day % 7 if isinstance(day, int) else day for day in parsed.weekdays}
        # Vixie cron: days of the month and of the week both match ("and")
        # when either field starts with "*", else either matches ("or"); a
        # whole field in an "or" makes every day match.
        joined = "and" if parsed.day_and else "or"
        if joined == "or" and (set(range(1, 32)) <= days or set(range(7)) <= weekdays):
            days, weekdays, joined = set(range(1, 32)), set(range(7)), "and"
        fields = (parsed.seconds, parsed.minutes, parsed.hours, days, parsed.months, weekdays)
        text = " ".join(",".join(sorted(map(str, values), key=_numerically)) for values in fields)
        return f"{text} {joined} {self.time_zone or ''}".rstrip()

    def describe(self) -> str:
        """The schedule in words, like "At 02:05 every day"."""
        return str(CronSim(self._cronsim, self.local(timezone.now())).explain())

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
        return self._fires_around(moment)[0]

    def next_fire(self, moment: datetime.datetime) -> datetime.datetime | None:
        """The first fire time after ``moment``."""
        return self._fires_around(moment)[1]

    def _fires_around(
        self, moment: datetime.datetime
    ) -> tuple[datetime.datetime | None, datetime.datetime | None]:
        """The latest fire at or before ``moment`` and the first after it.

        Both stay the same from one fire to the next, and a scheduler asks
        for them for every job each time it wakes: they are walked once per
        expression and zone per fire, and kept (``_AROUND``) for every
        moment between the two.
        """
        key = (self._cronsim, self.zone_name)
        latest, following = _AROUND.get(key, (None, None))
        if latest is not None and following is not None and latest <= moment < following:
            return latest, following
        latest = next(self.fires_before(moment), None)
        following = next(self.fires_after(moment), None)
        _AROUND[key] = (latest, following)
        return latest, following

    @property
    def at_set_local_times(self) -> bool:
        """Whether cronsim moves a fire that a spring-forward change skips to
        the change, as Debian cron does: five fields, minute and hour without ``*``."""
        fields = self._cronsim.split()
        return len(fields) == 5 and not fields[0].startswith("*") and not fields[1].startswith("*")

    def shortest_gap(self) -> tuple[datetime.datetime, datetime.datetime]:
        """Two consecutive fires, as wall times, as close as any two ever are.

        Worked out from the fields, for all time, once per expression in a
        process (``_shortest_gap()``): every process that loads the jobs,
        a job's own run too, checks each one's jitter and window against it.
        """
        return _shortest_gap(self._cronsim)


def _numerically(value: str) -> str:
    """A sort key that puts a field's numbers in their order (9 before 10)."""
    return value.rjust(8)


@functools.cache
def _parsed(expression: str) -> CronSim:
    """``expression`` read by cronsim, once per process: its fields' sets of
    values, or ``CronSimError``. Never walked (a walk moves it)."""
    return CronSim(expression, datetime.datetime(2000, 1, 1))


#: By expression (as cronsim reads it) and zone name, its latest fire at or
#: before some moment and its first fire after it (``_fires_around()``).
_AROUND: dict[tuple[str, str], tuple[datetime.datetime | None, datetime.datetime | None]] = {}


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


#: After this many days dates and weekdays repeat: 400 Gregorian years.
_CALENDAR_CYCLE = 146_097
#: The first year of the cycle the fire days are laid out over.
_CYCLE_START = 2001


@functools.cache
def _shortest_gap(expression: str) -> tuple[datetime.datetime, datetime.datetime]:
    """``CronSchedule.shortest_gap()`` of an expression as cronsim reads it.

    The closest two times of one day (``_closest_times()``), and the closest
    two fire days of the calendar's cycle (``_closest_days()``) with the
    last time of the first and the first time of the second: the pair
    across two days wins a tie, and the day's own pair falls on the first
    of those days.
    """
    fields = _parsed(expression)
    hours, minutes, seconds = (
        sorted(each) for each in (fields.hours, fields.minutes, fields.seconds)
    )
    days = _closest_days(
        frozenset(fields.months), frozenset(fields.days), frozenset(fields.weekdays), fields.day_and
    )
    across = (
        datetime.datetime.combine(days[0], datetime.time(hours[-1], minutes[-1], seconds[-1])),
        datetime.datetime.combine(days[1], datetime.time(hours[0], minutes[0], seconds[0])),
    )
    closest = _closest_times(hours, minutes, seconds)
    if closest is None or across[1] - across[0] <= _seconds_apart(closest) * SECOND:
        return across
    return (
        datetime.datetime.combine(days[0], closest[0]),
        datetime.datetime.combine(days[0], closest[1]),
    )


def _closest_times(
    hours: list[int], minutes: list[int], seconds: list[int]
) -> tuple[datetime.time, datetime.time] | None:
    """The first two consecutive times of a day as close as any two are
    (None: one time a day), from the sorted values of each field.

    Two consecutive times are two seconds of one minute, the last second of
    one minute and the first of the next in one hour, or the last time of
    one hour and the first of the next. Each kind's closest pair comes
    first in the day's first minute or hour, so three candidates settle it.
    """
    kinds = (
        (seconds, lambda s: (hours[0], minutes[0], s), lambda s: (hours[0], minutes[0], s)),
        (minutes, lambda m: (hours[0], m, seconds[-1]), lambda m: (hours[0], m, seconds[0])),
        (hours, lambda h: (h, minutes[-1], seconds[-1]), lambda h: (h, minutes[0], seconds[0])),
    )
    candidates = []
    for values, earlier, later in kinds:
        pairs = [
            (datetime.time(*earlier(before)), datetime.time(*later(after)))
            for before, after in itertools.pairwise(values)
        ]
        if pairs:
            closest = min(pairs, key=_seconds_apart)
            candidates.append((_seconds_apart(closest), _seconds_of(closest[0]), closest))
    return min(candidates)[2] if candidates else None


def _seconds_of(time: datetime.time) -> int:
    return time.hour * 3600 + time.minute * 60 + time.second


def _seconds_apart(times: tuple[datetime.time, datetime.time]) -> int:
    return _seconds_of(times[1]) - _seconds_of(times[0])


@functools.cache
def _closest_days(
    months: frozenset[int], days: frozenset[int], weekdays: frozenset[object], day_and: bool
) -> tuple[datetime.date, datetime.date]:
    """The first two consecutive fire days of the calendar's cycle as close
    as any two are, from 1 January 2001, the cycle read as a ring: its last
    fire day is followed by its first, 400 years on.

    A year's fire days depend only on whether it is a leap year and on the
    weekday it begins on: fourteen kinds of year (``_days_of_year()``). Where
    every kind has one, two consecutive fire days are two of one year, or
    the last of a year and the first of the next: the closest are among
    each kind's closest two, in the first year of that kind, and the two
    across each pair of kinds that follow one another, where they first do
    (``_cycle_kinds()``). Where some kind has none (29 February), one pass
    over the 400 years (``_closest_by_years()``).
    """
    kinds = {kind: _days_of_year(months, days, weekdays, day_and, *kind) for kind in _KINDS}
    if not all(fire_days for fire_days, _inside in kinds.values()):
        return _closest_by_years(kinds)
    firsts, follows = _cycle_kinds()
    candidates = []  # Days apart, and the two days' ordinals.
    for kind, start in firsts.items():
        if (inside := kinds[kind][1]) is not None:
            candidates.append((inside[1] - inside[0], start + inside[0], start + inside[1]))
    for (before, after), start in follows.items():
        earlier = start - _year_length(before) + kinds[before][0][-1]
        later = start + kinds[after][0][0]
        candidates.append((later - earlier, earlier, later))
    _gap, earlier, later = min(candidates)
    return datetime.date.fromordinal(earlier), datetime.date.fromordinal(later)


def _closest_by_years(
    kinds: dict[tuple[bool, int], tuple[list[int], tuple[int, int] | None]],
) -> tuple[datetime.date, datetime.date]:
    """``_closest_days()`` of fire days some kinds of year have none of:
    each year of the cycle in turn, its closest two known from its kind,
    and the two from the last fire day before it to its first."""
    closest: tuple[int, int, int] | None = None  # Days apart, and the two days' ordinals.
    first: int | None = None
    previous: int | None = None

    def meet(earlier: int, later: int) -> None:
        nonlocal closest
        if closest is None or later - earlier < closest[0]:
            closest = (later - earlier, earlier, later)

    for ordinal, kind in _cycle_years():
        fire_days, inside = kinds[kind]
        if not fire_days:
            continue
        if previous is None:
            first = ordinal + fire_days[0]
        else:
            meet(previous, ordinal + fire_days[0])
        if inside is not None:
            meet(ordinal + inside[0], ordinal + inside[1])
        previous = ordinal + fire_days[-1]
    assert previous is not None, "cronsim refuses an expression that never fires"
    assert first is not None
    meet(previous, first + _CALENDAR_CYCLE)
    assert closest is not None
    return datetime.date.fromordinal(closest[1]), datetime.date.fromordinal(closest[2])


@functools.cache
def _cycle_kinds() -> tuple[dict[tuple[bool, int], int], dict[tuple[tuple[bool, int], ...], int]]:
    """Where each kind of year first comes in the cycle, and each pair of
    kinds that follow one another (the last year's by the first's, round the
    ring): the ordinal of 1 January of that year, of the later one's."""
    years = _cycle_years()
    firsts: dict[tuple[bool, int], int] = {}
    follows: dict[tuple[tuple[bool, int], ...], int] = {}
    for ordinal, kind in years:
        firsts.setdefault(kind, ordinal)
    ring = [*years, (years[0][0] + _CALENDAR_CYCLE, years[0][1])]
    for (_, before), (ordinal, after) in itertools.pairwise(ring):
        follows.setdefault((before, after), ordinal)
    return firsts, follows


def _year_length(kind: tuple[bool, int]) -> int:
    return 366 if kind[0] else 365


#: The kinds of year: a leap year or not, and the weekday it begins on (Monday 0).
_KINDS = [(leap, weekday) for leap in (False, True) for weekday in range(7)]


@functools.cache
def _cycle_years() -> list[tuple[int, tuple[bool, int]]]:
    """Each year of the cycle: its 1 January's ordinal, and its kind (a
    leap year or not, and the weekday it begins on, Monday 0)."""
    years = []
    for year in range(_CYCLE_START, _CYCLE_START + 400):
        start = datetime.date(year, 1, 1)
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        years.append((start.toordinal(), (leap, start.weekday())))
    return years


def _days_of_year(
    months: frozenset[int],
    days: frozenset[int],
    weekdays: frozenset[object],
    day_and: bool,
    leap: bool,
    weekday: int,
) -> tuple[list[int], tuple[int, int] | None]:
    """The fire days of a kind of year, as days after its 1 January, and
    its first two consecutive ones as close as any two are (None: fewer than
    two). ``weekday`` is 1 January's, Monday 0."""
    fire_days: list[int] = []
    offset = 0
    for month in range(1, 13):
        length = _MONTH_LENGTHS[month] + (1 if leap and month == 2 else 0)
        if month in months:
            matched = _days_of_month(days, weekdays, day_and, length, (weekday + offset) % 7)
            fire_days += [offset + day - 1 for day in matched]
        offset += length
    if len(fire_days) < 2:
        return fire_days, None
    at = min(range(len(fire_days) - 1), key=lambda index: fire_days[index + 1] - fire_days[index])
    return fire_days, (fire_days[at], fire_days[at + 1])


@functools.cache
def _days_of_month(
    days: frozenset[int], weekdays: frozenset[object], day_and: bool, length: int, weekday: int
) -> list[int]:
    """The days of a month of ``length`` days beginning on ``weekday``
    (Monday 0) that the day fields match, as cronsim matches them: day of
    month and day of week where either field starts with ``*``, either one
    otherwise (Vixie cron's rule)."""
    on_day = {day for day in days if 1 <= day <= length}
    if CronSim.LAST in days:
        on_day.add(length)
    if CronSim.LAST_WEEKDAY in days:
        last = (weekday + length - 1) % 7  # Saturday 5, Sunday 6: back to Friday.
        on_day.add(length - max(last - 4, 0))
    on_weekday: set[int] = set()
    for each in weekdays:
        # cronsim's weekdays: 0 or 7 Sunday, 1 Monday; "5#2" (5, 2), "5L" (5, LAST).
        name, nth = each if isinstance(each, tuple) else (each, None)
        first = (name - 1 - weekday) % 7 + 1
        every = range(first, length + 1, 7)
        if nth is None:
            on_weekday.update(every)
        elif nth == CronSim.LAST:
            on_weekday.add(every[-1])
        elif nth <= len(every):
            on_weekday.add(every[nth - 1])
    return sorted(on_day & on_weekday if day_and else on_day | on_weekday)


#: Days in each month of a common year, at the index of its number.
_MONTH_LENGTHS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
