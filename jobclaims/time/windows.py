"""How a moment maps to the window (the schedule slot) a run belongs to.

A window is named by a string key. Two instances of a job that compute the
same key are competing for the same run; the unique constraint on
``(job, window)`` lets exactly one of them have it.

Calendar windows ("minutely", "hourly", "daily", "weekly", "monthly") follow
the project's ``TIME_ZONE``, so a daily job's window is the local day. Keys of
windows shorter than a day carry the UTC offset, which keeps the two 01:00
hours of a daylight-saving change apart. A ``timedelta`` cuts time into fixed
buckets counted from the Unix epoch, the same on every host.

Every instant has exactly one key, and a key or an operator's text is read
as a wall time by the rule of ``jobclaims.time.wall_times``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass

from django.utils import timezone

from jobclaims.time import wall_times
from jobclaims.time.wall_times import UTC

WindowSpec = str | datetime.timedelta

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
SECOND = datetime.timedelta(seconds=1)
DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class CalendarWindow:
    """A window that follows the calendar in the project's time zone."""

    name: str

    def key_at(self, moment: datetime.datetime) -> str:
        local = wall_times.local(moment)
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
        return _distinct_keys(self, start, end, self._step)

    def through(
        self, start: datetime.datetime, end: datetime.datetime
    ) -> Iterator[tuple[datetime.datetime, str]]:
        """Keys of the windows from the one holding ``start`` through the one
        holding ``end``, oldest first, each with a moment in it, read as they
        are asked for."""
        return _through(self, start, end, self._step)

    @property
    def _step(self) -> datetime.timedelta:
        """A step shorter than any window of this kind, and a divisor of it in UTC."""
        return datetime.timedelta(minutes=1 if self.name == "minutely" else 60)

    def start_of(self, key: str) -> datetime.datetime:
        """The moment the window ``key`` names began."""
        return self._parse(key)

    def end_of(self, key: str, start: datetime.datetime) -> datetime.datetime:
        """When the window ``key`` (which began at ``start``) ends: the start
        of the next one.

        A day's, week's or month's next key comes from the calendar: found
        by stepping through the window an hour at a time, as a minute's and
        an hour's are, it cost each claim of a monthly window 3 ms of CPU.
        """
        if self.name in ("minutely", "hourly"):
            moment = start + self._step
            while self.key_at(moment) == key:
                moment += self._step
            return self.start_of(self.key_at(moment))
        day = wall_times.local(start).date()
        if self.name == "daily":
            following = (day + DAY).isoformat()
        elif self.name == "weekly":
            year, week, _ = (day + 7 * DAY).isocalendar()
            following = f"{year}-W{week:02d}"
        else:
            month = (day.replace(day=28) + 4 * DAY).replace(day=1)
            following = f"{month.year}-{month.month:02d}"
        # A day the zone skipped (Apia's 30 December 2011) has no window:
        # the key of the instant its midnight names is the next window's.
        return self.start_of(self.key_at(self.start_of(following)))

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
            return wall_times.parse(text)
        return wall_times.aware(day)


@dataclass(frozen=True)
class FixedWindow:
    """Fixed-length buckets counted from the Unix epoch."""

    size: datetime.timedelta

    @property
    def name(self) -> str:
        return f"{int(self.size.total_seconds())}-second"

    def key_at(self, moment: datetime.datetime) -> str:
        buckets = (moment.astimezone(UTC) - EPOCH) // self.size
        return wall_times.canonical(wall_times.local(EPOCH + buckets * self.size))

    def keys_between(self, start: datetime.datetime, end: datetime.datetime) -> list[str]:
        """Keys of the buckets from ``start``'s up to, not including, ``end``'s."""
        return _distinct_keys(self, start, end, self.size)

    def through(
        self, start: datetime.datetime, end: datetime.datetime
    ) -> Iterator[tuple[datetime.datetime, str]]:
        """Keys of the buckets from ``start``'s through ``end``'s, oldest first,
        each with a moment in it, read as they are asked for."""
        return _through(self, start, end, self.size)

    @property
    def longest(self) -> datetime.timedelta:
        return self.size

    def start_of(self, key: str) -> datetime.datetime:
        """The moment the bucket ``key`` names began: its key is that moment."""
        return wall_times.parse(key)

    def end_of(self, key: str, start: datetime.datetime) -> datetime.datetime:
        """When the bucket ``key`` (which began at ``start``) ends."""
        return start + self.size

    def key_for(self, text: str) -> str:
        try:
            return self.key_at(wall_times.parse(text))
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


def _through(
    window: CalendarWindow | FixedWindow,
    start: datetime.datetime,
    end: datetime.datetime,
    step: datetime.timedelta,
) -> Iterator[tuple[datetime.datetime, str]]:
    # A window's keys follow time, so each new key is one not seen before.
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    last = None
    moment = start
    while True:
        moment = min(moment, end)
        key = window.key_at(moment)
        if key != last:
            yield moment, key
            last = key
        if moment >= end:
            return
        moment += step


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
