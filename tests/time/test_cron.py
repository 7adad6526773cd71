"""The shortest gap between two fires, worked out from the fields, against a walk of the calendar.

``CronSchedule.shortest_gap()`` proves a job's jitter and fixed window
shorter than any gap between its fires, for all time, without walking the
calendar. Here a brute-force walk of its own, sharing nothing with cronsim or
``jobclaims.time.cron``, reads each expression the way Vixie cron does (with
cronsim's ``L``, ``LW``, ``5L`` and ``MON#2`` beside it), lists every fire day
of the Gregorian calendar's 400-year cycle and every fire time of a day, and
finds the closest two consecutive fires; the computation must agree.
"""

from __future__ import annotations

import calendar
import datetime
import functools
import itertools

import pytest
from django.test import override_settings
from django.utils import timezone

from jobclaims.time.cron import CronSchedule
from tests.support import vixie

#: Days in 400 Gregorian years, after which dates and weekdays repeat.
CYCLE = 146_097
SECONDS = vixie.Field(0, 59)

#: Expressions chosen for what makes a calendar hard: leap days, months
#: without a 31st, the OR of both day fields, the last and nth weekdays,
#: the seconds field, times that meet across midnight, nicknames.
TRICKY = [
    "0 0 29 2 *",
    "30 2 29 2 *",
    "0 0 31 * *",
    "0 0 30 * *",
    "0 0 31 1,3 SUN",
    "0 0 29 2 1",
    "0 0 29 2 SUN#5",
    "0 0 * 2 MON#5",
    "0 0 30 2 MON",
    "0 0 13 * 5",
    "0 0 1-7 * 1",
    "0 0 */2 * 1",
    "0 0 1 * 1,7",
    "0 0 L * *",
    "0 0 1,L * *",
    "0 0 L 2 *",
    "0 0 LW * *",
    "0 0 LW 2 *",
    "0 0 * * 5L",
    "0 0 * * 0L",
    "0 0 * * 7#1",
    "0 0 L * 5",
    "0 0 LW * 5L",
    "0 0 15 * 3L",
    "0 0 28-31 * *",
    "59 23 31 12 *",
    "0 0 1,3,31 1,12 *",
    "0 22-23 * * 1-5",
    "0 9,17 * * 1-5",
    "0 0,12 1 */2 *",
    "*/30 */5 * * 1 *",
    "0 0 12 29 2 *",
    "10,20 5 1 * * *",
    "*/15 * * * *",
    "@weekly",
    "@monthly",
    "@yearly",
]


@pytest.mark.parametrize("expression", TRICKY)
def test_the_shortest_gap_of_a_tricky_expression_agrees_with_a_walk_of_the_calendar(expression):
    assert_agrees(expression)


def test_the_shortest_gap_agrees_with_a_walk_of_the_calendar_for_generated_expressions():
    for expression in vixie.expressions(seed=40, how_many=40, most_fires=10**6):
        assert_agrees(expression)


def assert_agrees(expression: str) -> None:
    """The computed pair: two consecutive fires, as close as any two in the walk."""
    first, second = CronSchedule(expression).shortest_gap()
    gap, fire_days, times = walk(expression)
    assert second - first == gap, expression
    # Both are fires, and none comes between them.
    assert {first.time(), second.time()} <= set(times), expression
    assert {cycle_day(first.date()), cycle_day(second.date())} <= set(fire_days), expression
    if first.date() == second.date():
        assert times[times.index(first.time()) + 1] == second.time(), expression
        return
    assert (first.time(), second.time()) == (times[-1], times[0]), expression
    ring = [*fire_days, fire_days[0] + CYCLE]
    following = ring[ring.index(cycle_day(first.date())) + 1]
    assert following - cycle_day(first.date()) == (second.date() - first.date()).days, expression


def walk(expression: str) -> tuple[datetime.timedelta, list[int], list[datetime.time]]:
    """The shortest gap between two consecutive fires of ``expression``,
    the cycle's fire days (as days since 1 January 2001) and its times of a day.

    The cycle is a ring: its last fire day is followed by its first, 400
    years on. Each day of it is matched on its own.
    """
    fields = expression_fields(expression)
    seconds = vixie.values(fields[0], SECONDS) if len(fields) == 6 else {0}
    minute, hour, day, month, weekday = fields[-5:]
    either = not (day.startswith("*") or weekday.startswith("*"))
    months = vixie.values(month, vixie.MONTH)
    on_day, on_weekday = DayOfMonth(day), DayOfWeek(weekday)
    fire_days = []
    for offset, (date, last) in enumerate(cycle()):
        if date.month not in months:
            continue
        by_day, by_weekday = on_day.names(date, last), on_weekday.names(date, last)
        if (by_day or by_weekday) if either else (by_day and by_weekday):
            fire_days.append(offset)
    times = sorted(
        datetime.time(h, m, s)
        for h in vixie.values(hour, vixie.HOUR)
        for m in vixie.values(minute, vixie.MINUTE)
        for s in seconds
    )
    in_a_day = [seconds_of(b) - seconds_of(a) for a, b in itertools.pairwise(times)]
    ring = [*fire_days, fire_days[0] + CYCLE]
    across = [
        (later - earlier) * 24 * 3600 - seconds_of(times[-1]) + seconds_of(times[0])
        for earlier, later in itertools.pairwise(ring)
    ]
    return datetime.timedelta(seconds=min(in_a_day + across)), fire_days, times


def expression_fields(expression: str) -> list[str]:
    nicknames = {"@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *"}
    return nicknames.get(expression, expression).upper().split()


class DayOfMonth:
    """The day-of-month field: numbers, L (the month's last day) and LW (its
    last Monday to Friday)."""

    def __init__(self, text: str):
        terms = text.split(",")
        self.last = "L" in terms
        self.last_weekday = "LW" in terms
        self.days: set[int] = set()
        for term in terms:
            if term not in ("L", "LW"):
                self.days |= vixie.values(term, vixie.DAY_OF_MONTH)

    def names(self, date: datetime.date, last: int) -> bool:
        if date.day in self.days or (self.last and date.day == last):
            return True
        if not self.last_weekday:
            return False
        last_date = date.replace(day=last)
        return date == last_date - datetime.timedelta(days=max(last_date.weekday() - 4, 0))


class DayOfWeek:
    """The day-of-week field: weekdays (0 and 7 are Sunday), the last of a
    weekday in the month (5L) and the nth (MON#2)."""

    def __init__(self, text: str):
        self.weekdays: set[int] = set()
        self.lasts: set[int] = set()
        self.nths: set[tuple[int, int]] = set()
        for term in text.split(","):
            if term.endswith("L"):
                self.lasts.add(int(term[:-1]) % 7)
            elif "#" in term:
                name, nth = term.split("#")
                self.nths |= {(day % 7, int(nth)) for day in vixie.values(name, vixie.DAY_OF_WEEK)}
            else:
                self.weekdays |= {day % 7 for day in vixie.values(term, vixie.DAY_OF_WEEK)}

    def names(self, date: datetime.date, last: int) -> bool:
        weekday = date.isoweekday() % 7
        return (
            weekday in self.weekdays
            or (weekday in self.lasts and date.day + 7 > last)
            or (weekday, (date.day - 1) // 7 + 1) in self.nths
        )


@functools.cache
def cycle() -> list[tuple[datetime.date, int]]:
    """Every day of 400 years from 1 January 2001, with its month's length."""
    start = datetime.date(2001, 1, 1)
    days = []
    for offset in range(CYCLE):
        date = start + datetime.timedelta(days=offset)
        days.append((date, calendar.monthrange(date.year, date.month)[1]))
    return days


def cycle_day(date: datetime.date) -> int:
    """``date`` as days since 1 January 2001, within the cycle."""
    return (date - datetime.date(2001, 1, 1)).days % CYCLE


def seconds_of(time: datetime.time) -> int:
    return time.hour * 3600 + time.minute * 60 + time.second


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("*/3 * * * *", "0-59/3 * * * *"),
        ("0 20 * * *", "0 0 20 * * *"),
        ("@daily", "0 0 * * *"),
        ("0 0 * * 0", "0 0 * * 7"),
        ("0 0 * * SUN", "0 0 * * 0"),
        ("0 9 * JAN-MAR MON-FRI", "0 9 * 1,2,3 1-5"),
        ("0 0 1-31 * 1", "0 0 * * *"),  # Either day field matches, and one is every day.
    ],
)
def test_two_spellings_of_the_same_fires_have_the_same_fires(one, other):
    assert CronSchedule(one).fires == CronSchedule(other).fires


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (CronSchedule("*/3 * * * *"), CronSchedule("*/4 * * * *")),
        (CronSchedule("0 0 1 * 1"), CronSchedule("0 0 1 * *")),  # Or the Mondays, or not.
        (CronSchedule("0 2 * * *"), CronSchedule("0 2 * * *", "Europe/Paris")),
    ],
)
def test_schedules_of_other_fires_differ(one, other):
    assert one.fires != other.fires


@override_settings(TIME_ZONE="Europe/Paris")
def test_a_schedule_without_a_zone_fires_in_time_zone_whatever_zone_is_active():
    """A user's zone a middleware activated (an admin's "Run now", a view)
    moves no fire: 02:00 is TIME_ZONE's 02:00 for every host and request."""
    nightly = CronSchedule("0 2 * * *")
    moment = datetime.datetime(2026, 12, 7, 12, tzinfo=datetime.timezone.utc)
    fires = list(itertools.islice(nightly.fires_after(moment), 2))
    with timezone.override("Asia/Tokyo"):
        assert list(itertools.islice(nightly.fires_after(moment), 2)) == fires
        assert nightly.zone_name == "Europe/Paris"
    assert fires[0] == datetime.datetime(2026, 12, 8, 1, tzinfo=datetime.timezone.utc)
