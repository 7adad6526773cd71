"""Vixie cron's reading of a five-field expression, written out by brute force.

An evaluator of its own, sharing nothing with cronsim or ``jobclaims.jobs.schedules``,
to hold the parser to: each field is a set of values (``get_range()`` in
Vixie cron's entry.c), and a minute fires when minute, hour and month are in
their sets and the day matches (``cron.c``: day of month AND day of week
when either field starts with ``*``, OR otherwise). Times are in UTC, where
Vixie cron and the project's zone cannot disagree about daylight saving.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Iterator
from dataclasses import dataclass

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


@dataclass(frozen=True)
class Field:
    low: int
    high: int
    names: tuple[str, ...] = ()
    #: The value a name's index starts at (JAN is 1, SUN is 0).
    first_name: int = 0


MINUTE = Field(0, 59)
HOUR = Field(0, 23)
DAY_OF_MONTH = Field(1, 31)
MONTH = Field(1, 12, tuple(MONTHS), 1)
# Vixie cron takes 0 to 7 and folds 7, Sunday again, into 0.
DAY_OF_WEEK = Field(0, 7, tuple(DAYS), 0)
FIELDS = (MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)


def values(text: str, field: Field) -> set[int]:
    """The values a field's text names: a list of ranges, each with an optional step."""
    found: set[int] = set()
    for term in text.split(","):
        span, _, step = term.partition("/")
        if span == "*":
            first, last = field.low, field.high
        else:
            low, _, high = span.partition("-")
            first = _number(low, field)
            last = _number(high, field) if high else first
        found.update(range(first, last + 1, int(step or 1)))
    return found


def _number(text: str, field: Field) -> int:
    if text.upper() in field.names:
        return field.names.index(text.upper()) + field.first_name
    return int(text)


def fires(expression: str, year: int) -> Iterator[datetime.datetime]:
    """Every minute of ``year``, in UTC, at which Vixie cron runs ``expression``."""
    texts = expression.split()
    minutes, hours, days, months, weekdays = (
        values(text, field) for text, field in zip(texts, FIELDS, strict=True)
    )
    weekdays = {day % 7 for day in weekdays}
    either = not (texts[2].startswith("*") or texts[4].startswith("*"))
    day = datetime.date(year, 1, 1)
    while day.year == year:
        on_day = day.day in days
        on_weekday = day.isoweekday() % 7 in weekdays
        if day.month in months and ((on_day or on_weekday) if either else on_day and on_weekday):
            for hour in sorted(hours):
                for minute in sorted(minutes):
                    yield datetime.datetime(
                        day.year, day.month, day.day, hour, minute, tzinfo=datetime.timezone.utc
                    )
        day += datetime.timedelta(days=1)


def count(expression: str) -> int:
    """How many minutes of a 365-day year may fire at most: to keep walks short."""
    texts = expression.split()
    minutes, hours = values(texts[0], MINUTE), values(texts[1], HOUR)
    return len(minutes) * len(hours) * 366


def expressions(seed: int, how_many: int, most_fires: int) -> list[str]:
    """``how_many`` random expressions, each firing at most ``most_fires`` times a year.

    Every kind of term Vixie cron reads, with one-value ranges with a step
    (``30-30/15``) and steps past a range's end among them.
    """
    chooser = random.Random(seed)
    found: list[str] = []
    while len(found) < how_many:
        expression = " ".join(_field_text(chooser, field) for field in FIELDS)
        if count(expression) <= most_fires:
            found.append(expression)
    return found


def _field_text(chooser: random.Random, field: Field) -> str:
    terms = chooser.choices((1, 2, 3), weights=(6, 3, 1))[0]
    return ",".join(_term(chooser, field) for _ in range(terms))


def _term(chooser: random.Random, field: Field) -> str:
    # Days of month past 28 are rare, or most expressions would fire never in some month.
    high = 28 if field is DAY_OF_MONTH else field.high
    first = chooser.randint(field.low, high)
    last = chooser.randint(first, high)
    step = chooser.randint(1, max(1, (field.high - field.low) // 2))
    kind = chooser.choice(("*", "n", "range", "range/step", "*/step", "n-n/step"))
    text = {
        "*": "*",
        "n": f"{_spelled(chooser, field, first)}",
        "range": f"{_spelled(chooser, field, first)}-{_spelled(chooser, field, last)}",
        "range/step": f"{first}-{last}/{step}",
        "*/step": f"*/{step}",
        "n-n/step": f"{_spelled(chooser, field, first)}-{_spelled(chooser, field, first)}/{step}",
    }[kind]
    return text


def _spelled(chooser: random.Random, field: Field, value: int) -> str:
    """``value``, or its name now and then (JAN, MON), as cron reads both."""
    index = value - field.first_name
    if field.names and 0 <= index < len(field.names) and chooser.random() < 0.3:
        return field.names[index]
    return str(value)
