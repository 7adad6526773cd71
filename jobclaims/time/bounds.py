"""A schedule's fires between two dates, without the dates it skips, at most so many.

``Bounded`` keeps the fires of a cron expression or an interval that fall
from its ``start`` through its ``end``, on no date of ``skip_dates`` (local
dates in the schedule's zone: holidays), and only the first ``max_runs`` of
those from ``start``. Each kept fire is the same instant, with the same key,
as without the bounds: bounds take fires away and move none, so a deploy
that adds or changes them never makes a fire new.

``"at 2026-12-24T18:00"`` is a schedule of one fire (``OneOff``).
"""

from __future__ import annotations

import datetime
import functools
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from jobclaims.time import wall_times
from jobclaims.time.fire_times import FireTimes
from jobclaims.time.wall_times import UTC, named_zone

#: Where the fires of a schedule without ``start`` may begin: no walk goes
#: back further than a look at its latest fire needs.
EARLIEST = datetime.datetime(1970, 1, 1, tzinfo=UTC)
#: How far apart the one fire of a one-off and the next it never has are,
#: for the checks that a jitter or window is shorter than any gap.
_NEVER = datetime.timedelta(days=365 * 1000)


def is_one_off(expression: str) -> bool:
    """Whether ``expression`` is meant as a one-off: it starts with "at"."""
    return expression.strip().lower().startswith("at ")


@dataclass(frozen=True)
class OneOff(FireTimes):
    """``at DATE-TIME``: one fire, a wall time in the schedule's zone unless
    it carries an offset."""

    expression: str
    #: An IANA zone name; None: the project's ``TIME_ZONE``.
    time_zone: str | None = None

    def __post_init__(self) -> None:
        self.fire  # noqa: B018  # Refused here, with the fix, rather than at a fire.

    @functools.cached_property
    def fire(self) -> datetime.datetime:
        """Its one fire, in UTC."""
        text = self.expression.strip()[2:].strip()
        zone = None if self.time_zone is None else named_zone(self.time_zone)
        try:
            return wall_times.parse(text, zone).astimezone(UTC)
        except ValueError as error:
            raise ValueError(
                f"schedule {self.expression!r}: {error}; write a one-off like "
                "'at 2026-12-24T18:00' (a date and time)"
            ) from None

    @property
    def fires(self) -> str:
        return f"at {self.fire.isoformat()}"

    def describe(self) -> str:
        return f"Once, at {self.local(self.fire):%Y-%m-%d %H:%M:%S %Z}"

    def fires_after(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        if self.fire > moment:
            yield self.fire

    def fires_before(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        if self.fire <= moment:
            yield self.fire

    def shortest_gap(self) -> tuple[datetime.datetime, datetime.datetime]:
        """No second fire: a gap longer than any jitter or window."""
        return self.fire, self.fire + _NEVER


@dataclass(frozen=True)
class Bounded(FireTimes):
    """The fires of ``inner`` within its bounds, each as ``inner`` has it."""

    inner: FireTimes
    #: No fire before this instant; None: from ``inner``'s first.
    start: datetime.datetime | None = None
    #: No fire after this instant; None: no end.
    end: datetime.datetime | None = None
    #: Local dates, in the schedule's zone, with no fire.
    skip_dates: frozenset[datetime.date] = frozenset()
    #: Only the first this many fires from ``start``; None: no limit.
    max_runs: int | None = None

    @property
    def expression(self) -> str:  # type: ignore[override]  # Read-only: inner's.
        return self.inner.expression

    @property
    def time_zone(self) -> str | None:  # type: ignore[override]  # Read-only: inner's.
        return self.inner.time_zone

    @property
    def fires(self) -> str:
        """``inner``'s fires, then its bounds: bounds written another way
        (a date or its midnight, dates in another order) are one text."""
        return f"{self.inner.fires} {self.bounds}"

    def describe(self) -> str:
        said = [self.inner.describe()]
        if self.start is not None:
            said.append(f"from {self.local(self.start):%Y-%m-%d %H:%M %Z}")
        if self.end is not None:
            said.append(f"until {self.local(self.end):%Y-%m-%d %H:%M %Z}")
        if self.skip_dates:
            said.append(f"except on {', '.join(sorted(map(str, self.skip_dates)))}")
        if self.max_runs is not None:
            said.append(f"{self.max_runs} run{'s' if self.max_runs != 1 else ''} at most")
        return ", ".join(said)

    @property
    def bounds(self) -> str:
        """Its bounds, one text for one set of bounds however they were written."""
        parts = []
        if self.start is not None:
            parts.append(f"from {self.start.isoformat()}")
        if self.end is not None:
            parts.append(f"until {self.end.isoformat()}")
        if self.skip_dates:
            parts.append(f"skipping {','.join(sorted(map(str, self.skip_dates)))}")
        if self.max_runs is not None:
            parts.append(f"at most {self.max_runs} runs")
        return " ".join(parts)

    @functools.cached_property
    def _last(self) -> datetime.datetime | None:
        """The latest a kept fire may be: ``end``, or the ``max_runs``-th
        fire from ``start`` when that comes first; None: no end."""
        if self.max_runs is None:
            return self.end
        nth = self._from
        for nth in itertools.islice(self._kept(self.inner.fires_after(self._from)), self.max_runs):
            if self.end is not None and nth > self.end:
                return self.end
        return nth if self.end is None else min(nth, self.end)

    @property
    def _from(self) -> datetime.datetime:
        """Just before the first moment a fire may be: a fire at ``start`` is kept."""
        start = self.start or EARLIEST
        return start - datetime.timedelta(microseconds=1)

    def _kept(self, fires: Iterator[datetime.datetime]) -> Iterator[datetime.datetime]:
        return (fire for fire in fires if self.local(fire).date() not in self.skip_dates)

    def fires_after(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        last = self._last
        for fire in self._kept(self.inner.fires_after(max(moment, self._from))):
            if last is not None and fire > last:
                return
            yield fire

    def fires_before(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        last = self._last
        if last is not None:
            moment = min(moment, last)
        for fire in self._kept(self.inner.fires_before(moment)):
            if fire <= self._from:
                return
            yield fire

    @property
    def at_set_local_times(self) -> bool:
        return self.inner.at_set_local_times

    def shortest_gap(self) -> tuple[datetime.datetime, datetime.datetime]:
        """``inner``'s: bounds take fires away, which only widens gaps."""
        return self.inner.shortest_gap()


def bounded(
    fires: FireTimes,
    start: datetime.date | str | None = None,
    end: datetime.date | str | None = None,
    skip_dates: Iterable[datetime.date | str] = (),
    max_runs: int | None = None,
) -> FireTimes:
    """``fires`` within the bounds given (as ``Schedule`` takes them), or
    ``fires`` itself without any; ``ValueError`` naming the fix.

    A date (or an ISO 8601 date, "2026-12-01") as ``start`` is its first
    moment, as ``end`` its last: ``end="2027-01-31"`` keeps that day's fires.
    A date-time is that instant, a wall time in the schedule's zone unless it
    carries an offset. ``max_runs`` counts from ``start``, which it needs.
    """
    if isinstance(skip_dates, str):
        raise ValueError(f"skip_dates {skip_dates!r} must be a list of dates, like ['2026-12-25']")
    skipped = frozenset(_date("skip_dates", each) for each in skip_dates)
    if start is None and end is None and not skipped and max_runs is None:
        return fires
    zone = None if fires.time_zone is None else named_zone(fires.time_zone)
    first = None if start is None else _moment("start", start, zone, end_of_day=False)
    last = None if end is None else _moment("end", end, zone, end_of_day=True)
    if first is not None and last is not None and last < first:
        raise ValueError(f"end {end!r} comes before start {start!r}; swap them")
    if max_runs is not None:
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise ValueError(f"max_runs {max_runs!r} must be a whole number of runs, 1 or more")
        if first is None:
            raise ValueError(
                f"max_runs {max_runs} counts runs from the schedule's start, and it has none; "
                "give it start= (a date or date-time)"
            )
    return Bounded(fires, first, last, skipped, max_runs)


def _date(what: str, value: datetime.date | str) -> datetime.date:
    if isinstance(value, datetime.datetime):
        raise ValueError(f"{what} {value!r} must be dates, not date-times, like '2026-12-25'")
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        raise ValueError(
            f"{what} {value!r} must be dates, like datetime.date(2026, 12, 25) or '2026-12-25'"
        ) from None


def _moment(
    what: str, value: datetime.date | str, zone: datetime.tzinfo | None, *, end_of_day: bool
) -> datetime.datetime:
    """``value`` as an instant in UTC: a date is its first moment, or its
    last for the ``end`` of a range."""
    if isinstance(value, str) and "T" not in value and " " not in value.strip():
        try:
            value = datetime.date.fromisoformat(value)
        except ValueError:
            raise ValueError(
                f"{what} {value!r} must be a date or date-time, like '2026-12-01' or "
                "'2026-12-01T03:00'"
            ) from None
    if isinstance(value, datetime.datetime):
        moment = wall_times.aware(value, zone)
    elif isinstance(value, datetime.date):
        day = value + datetime.timedelta(days=1) if end_of_day else value
        moment = wall_times.aware(datetime.datetime.combine(day, datetime.time()), zone)
        if end_of_day:
            moment -= datetime.timedelta(microseconds=1)
    else:
        try:
            moment = wall_times.parse(str(value), zone)
        except ValueError as error:
            raise ValueError(f"{what} {value!r}: {error}") from None
    return moment.astimezone(UTC)
