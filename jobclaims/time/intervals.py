"""Fixed intervals: a schedule that fires every so long, from an anchor.

``"every 90 minutes"`` fires every 90 minutes of elapsed time, at the
instants ``anchor + n * 90 minutes``: the same instants whichever host or
process works them out, before or after a restart, so each fire has one key
everywhere. The anchor is the schedule's first fire: the date and time
after ``from`` (a wall time in the schedule's zone, or with its offset), or
by default the Unix epoch, 1970-01-01 00:00 UTC, so ``"every 15 minutes"``
fires at :00, :15, :30 and :45 and ``"every 2 hours"`` at even hours UTC.

An interval is elapsed time, whatever the wall clock does: ``"every 1 day"``
is every 24 hours, which a daylight-saving change moves an hour against
the local clock. A fire at one local time every day is cron's
(``"0 3 * * *"``).
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from jobclaims.time import wall_times
from jobclaims.time.fire_times import FireTimes
from jobclaims.time.wall_times import UTC, named_zone

#: The first fire of an interval without ``from``.
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)

_UNITS = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
}
_SPELLINGS = {
    **{unit: unit for unit in _UNITS},
    **{f"{unit}s": unit for unit in _UNITS},
    "s": "second",
    "sec": "second",
    "secs": "second",
    "m": "minute",
    "min": "minute",
    "mins": "minute",
    "h": "hour",
    "hr": "hour",
    "hrs": "hour",
    "d": "day",
}
_INTERVAL = re.compile(
    r"every\s+(?P<count>\d+)\s*(?P<unit>[a-z]+)(?:\s+from\s+(?P<anchor>\S+))?",
    re.IGNORECASE,
)
_HOW_TO = (
    "write it like 'every 90 minutes' (a whole number of seconds, minutes, hours or days), "
    "and add 'from 2026-12-01T03:00' for a first fire other than the Unix epoch"
)


def is_interval(expression: str) -> bool:
    """Whether ``expression`` is meant as an interval: it starts with "every"."""
    return expression.strip().lower().startswith("every")


@dataclass(frozen=True)
class IntervalSchedule(FireTimes):
    """``every N seconds|minutes|hours|days [from DATE-TIME]``, in a zone.

    The zone (``time_zone``, else ``TIME_ZONE``) reads the anchor and writes
    the keys; it moves no fire.
    """

    expression: str
    #: An IANA zone name ("America/New_York"); None: the project's ``TIME_ZONE``.
    time_zone: str | None = None

    def __post_init__(self) -> None:
        if self.time_zone is not None:
            named_zone(self.time_zone)
        self._parsed  # noqa: B018  # Refused here, with the fix, rather than at a fire.

    @functools.cached_property
    def _parsed(self) -> tuple[datetime.timedelta, datetime.datetime | None]:
        """The period, and the anchor ``from`` gives (None: the epoch)."""
        matched = _INTERVAL.fullmatch(" ".join(self.expression.split()))
        unit = _SPELLINGS.get(matched.group("unit").lower()) if matched else None
        if matched is None or unit is None:
            raise ValueError(f"schedule {self.expression!r} is not an interval; {_HOW_TO}")
        seconds = int(matched.group("count")) * _UNITS[unit]
        if seconds < 1:
            raise ValueError(f"schedule {self.expression!r} is no interval at all; {_HOW_TO}")
        anchor = None
        if text := matched.group("anchor"):
            zone = None if self.time_zone is None else named_zone(self.time_zone)
            try:
                anchor = wall_times.parse(text, zone).astimezone(UTC)
            except ValueError as error:
                raise ValueError(f"schedule {self.expression!r}: from {error}; {_HOW_TO}") from None
        return datetime.timedelta(seconds=seconds), anchor

    @property
    def period(self) -> datetime.timedelta:
        """How long from one fire to the next."""
        return self._parsed[0]

    @property
    def anchor(self) -> datetime.datetime:
        """The first fire, in UTC."""
        return self._parsed[1] or EPOCH

    @functools.cached_property
    def fires(self) -> str:
        """The period in seconds and the first fire in UTC: ``every 90
        minutes`` and ``every 5400 s`` are one text, ``from`` in any zone
        or offset naming the same instant is one text too."""
        return f"every {self.period.total_seconds():.0f}s from {self.anchor.isoformat()}"

    def describe(self) -> str:
        """Like "Every 90 minutes" or "Every 2 hours from 2026-12-01 03:00 CET"."""
        seconds = int(self.period.total_seconds())
        unit = next(unit for unit in reversed(_UNITS) if not seconds % _UNITS[unit])
        count = seconds // _UNITS[unit]
        words = f"Every {count} {unit}{'s' if count != 1 else ''}"
        if self._parsed[1] is None:
            return words
        return f"{words} from {self.local(self.anchor):%Y-%m-%d %H:%M:%S %Z}"

    def fires_after(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times after ``moment``, soonest first, in UTC."""
        fire = self._first_after(moment.astimezone(UTC))
        while True:
            yield fire
            fire += self.period

    def fires_before(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times at or before ``moment``, latest first, in UTC."""
        fire = self._first_after(moment.astimezone(UTC)) - self.period
        while fire >= self.anchor:
            yield fire
            fire -= self.period

    def _first_after(self, moment: datetime.datetime) -> datetime.datetime:
        """The first fire after ``moment``: whole periods from the anchor."""
        if moment < self.anchor:
            return self.anchor
        return self.anchor + ((moment - self.anchor) // self.period + 1) * self.period

    def shortest_gap(self) -> tuple[datetime.datetime, datetime.datetime]:
        """Any two consecutive fires: every gap is the period."""
        return self.anchor, self.anchor + self.period
