"""How a moment maps to the window (the schedule slot) a run belongs to.

A window is named by a string key. Two instances of a job that compute the
same key are competing for the same run; the unique constraint on
``(job, window)`` lets exactly one of them have it.

Calendar windows ("minutely", "hourly", "daily", "weekly", "monthly") follow
the project's ``TIME_ZONE``, so a daily job's window is the local day. Keys of
windows shorter than a day carry the UTC offset, which keeps the two 01:00
hours of a daylight-saving change apart. A ``timedelta`` cuts time into fixed
buckets counted from the Unix epoch, the same on every host.

Every instant has exactly one key. A wall time that a daylight-saving change
skips or repeats is read the way Python reads it (``fold=0``): one skipped by
a spring-forward change with the offset before the change, so 02:30 on the
night New York skips from 02:00 to 03:00 is 03:30 daylight time; one repeated
by a fall-back change as its first occurrence. An operator who means the
second 01:30 writes its offset: ``2026-11-01T01:30-05:00``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

WindowSpec = str | datetime.timedelta

UTC = datetime.timezone.utc

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
SECOND = datetime.timedelta(seconds=1)


@dataclass(frozen=True)
class CalendarWindow:
    """A window that follows the calendar in the project's time zone."""

    name: str

    def key_at(self, moment: datetime.datetime) -> str:
        local = _local(moment)
        if self.name == "minutely":
            return local.replace(second=0, microsecond=0).isoformat("T", "minutes")
        if self.name == "hourly":
            return local.replace(minute=0, second=0, microsecond=0).isoformat("T", "minutes")
        if self.name == "daily":
            return local.date().isoformat()
        if self.name == "weekly":
            year, week, _ = local.isocalendar()
            return f"{year}-W{week:02d}"
        return f"{local.year}-{local.month:02d}"

    def key_for(self, text: str) -> str:
        try:
            return self.key_at(self._parse(text))
        except ValueError:
            raise ValueError(
                f"{text!r} is not a valid {self.name} window; "
                f"write it like {self.key_at(timezone.now())}"
            ) from None

    def keys_between(self, start: datetime.datetime, end: datetime.datetime) -> list[str]:
        """Keys of the windows from the one holding ``start`` up to, not
        including, the one holding ``end``, oldest first.

        Steps through UTC, so a daylight-saving change yields each local
        hour that exists, the repeated one twice, the skipped one never.
        """
        step = datetime.timedelta(minutes=1 if self.name == "minutely" else 60)
        return _distinct_keys(self, start, end, step)

    def start_of(self, key: str) -> datetime.datetime:
        """The moment the window ``key`` names began."""
        return self._parse(key)

    @property
    def longest(self) -> datetime.timedelta:
        """The longest a window of this kind can last (a DST day has 25 hours)."""
        return {
            "minutely": datetime.timedelta(minutes=1),
            "hourly": datetime.timedelta(hours=1),
            "daily": datetime.timedelta(hours=25),
            "weekly": datetime.timedelta(days=7, hours=1),
            "monthly": datetime.timedelta(days=31, hours=1),
        }[self.name]

    def _parse(self, text: str) -> datetime.datetime:
        if self.name == "weekly" and "-W" in text:
            day = datetime.datetime.strptime(f"{text}-1", "%G-W%V-%u")
        elif self.name == "monthly" and len(text) == 7:
            day = datetime.datetime.strptime(text, "%Y-%m")
        elif self.name in ("minutely", "hourly") and "T" not in text:
            raise ValueError("a date alone does not name one hour or minute")
        else:
            return _moment(text)
        return _aware(day)


@dataclass(frozen=True)
class FixedWindow:
    """Fixed-length buckets counted from the Unix epoch."""

    size: datetime.timedelta

    @property
    def name(self) -> str:
        return f"{int(self.size.total_seconds())}-second"

    def key_at(self, moment: datetime.datetime) -> str:
        buckets = (moment.astimezone(UTC) - EPOCH) // self.size
        return canonical(_local(EPOCH + buckets * self.size))

    def keys_between(self, start: datetime.datetime, end: datetime.datetime) -> list[str]:
        """Keys of the buckets from ``start``'s up to, not including, ``end``'s."""
        return _distinct_keys(self, start, end, self.size)

    @property
    def longest(self) -> datetime.timedelta:
        return self.size

    def start_of(self, key: str) -> datetime.datetime:
        """The moment the bucket ``key`` names began: its key is that moment."""
        return _moment(key)

    def key_for(self, text: str) -> str:
        try:
            return self.key_at(_moment(text))
        except ValueError:
            raise ValueError(
                f"{text!r} is not a valid {self.name} window; "
                f"write it like {self.key_at(timezone.now())}"
            ) from None


CALENDAR_NAMES = ("minutely", "hourly", "daily", "weekly", "monthly")


def resolve(spec: WindowSpec) -> CalendarWindow | FixedWindow:
    """Turn a job's ``window`` attribute into a window, or explain the fix."""
    if isinstance(spec, datetime.timedelta):
        # A key names its bucket's start to the second, and the schedule
        # records the size in whole seconds: under a second, or with a
        # fraction, two buckets would share a key or a name would lie.
        if spec < SECOND or spec % SECOND:
            raise ValueError(
                f"window {spec!r} must be a whole number of seconds, at least 1, "
                "like datetime.timedelta(seconds=90)"
            )
        return FixedWindow(spec)
    if spec in CALENDAR_NAMES:
        return CalendarWindow(spec)
    raise ValueError(
        f"unknown window {spec!r}: use one of {', '.join(CALENDAR_NAMES)} or a datetime.timedelta"
    )


def from_name(name: str) -> CalendarWindow | FixedWindow:
    """The window a recorded schedule names: the inverse of ``.name``.

    Raises ``ValueError`` for a name no window has, such as the ``0-second``
    that a window under a second was once recorded as.
    """
    seconds = name.removesuffix("-second")
    if seconds != name:
        # Also more seconds than a timedelta holds (999,999,999 days).
        if not seconds.isdigit() or int(seconds) > datetime.timedelta.max // SECOND:
            raise ValueError(f"schedule {name!r} names no window")
        return resolve(datetime.timedelta(seconds=int(seconds)))
    return resolve(name)


def canonical(start: datetime.datetime) -> str:
    """The one key of a window or fire starting at ``start``, a local time:
    to the minute, with seconds only where they are not zero.

    One spelling per instant: ``timedelta(hours=1)`` and ``"hourly"`` name
    the same hour ``2026-12-01T20:00+00:00``, and a schedule that gains a
    seconds field keys its fires as before.
    """
    return start.isoformat("T", "seconds" if start.second else "minutes")


def _distinct_keys(
    window: CalendarWindow | FixedWindow,
    start: datetime.datetime,
    end: datetime.datetime,
    step: datetime.timedelta,
) -> list[str]:
    # Arithmetic on a datetime in a zone with daylight saving adds wall time
    # (01:00 + 1 h can be 02:00, an hour that does not exist), so step in UTC.
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    current = window.key_at(end)
    keys: dict[str, None] = {}
    moment = start
    while moment < end:
        keys[window.key_at(moment)] = None
        moment += step
    keys.pop(current, None)
    return list(keys)


def _moment(text: str, zone: datetime.tzinfo | None = None) -> datetime.datetime:
    """An ISO 8601 date or date-time, read the same on every Python version
    (3.10's ``fromisoformat`` refuses ``Z`` and short fractions of seconds).

    One without an offset is a wall time in ``zone``, by default the
    project's, read by the rule above."""
    moment = parse_datetime(text)
    if moment is None and (day := parse_date(text)) is not None:
        moment = datetime.datetime.combine(day, datetime.time())
    if moment is None:
        raise ValueError(f"{text!r} is not an ISO 8601 date or date-time")
    return _aware(moment, zone)


def _local(moment: datetime.datetime) -> datetime.datetime:
    """``moment`` in the project's time zone, by way of UTC.

    ``localtime()`` returns a datetime already in the current zone as it is,
    even a wall time that does not exist, whose key would then name an hour
    no scheduled run has. Through UTC every instant has one wall time.
    """
    return timezone.localtime(moment.astimezone(UTC))


def _aware(moment: datetime.datetime, zone: datetime.tzinfo | None = None) -> datetime.datetime:
    if timezone.is_naive(moment):
        return timezone.make_aware(moment, zone)
    return moment
