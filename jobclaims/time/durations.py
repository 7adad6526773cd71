"""How spans of time are read from operators and written back to them.

Operators type ages like ``30d``; the admin and the status table show leases
and run times in a few characters ("in 4 min", "2 h ago", "1 h 5 min"), which
fit a table column and an 80-column terminal.
"""

from __future__ import annotations

import argparse
import datetime
import re

from django.utils.translation import gettext

ZERO = datetime.timedelta()

_AGE = re.compile(r"(?P<count>\d+)(?P<unit>[dhm])")
_AGE_UNITS = {"d": "days", "h": "hours", "m": "minutes"}

#: The oldest an operator's age may reach back: a century holds every claim
#: there is, and "now" less a longer age can fall before the first date a
#: database stores (MariaDB's year 1000) or Python's year 1.
MAX_AGE = datetime.timedelta(days=36525)

# Largest first: a span is written in the largest unit it fills.
_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def problem(span: object, *, none_means: str = "", zero: bool = False) -> str:
    """What is wrong with ``span`` as a lease, wait, timeout, backoff or grace,
    or "" when it is fine: one wording for every span a user gives.

    The sentence follows the name the user gave: ``f"{name} {problem}"``.
    A span must be a ``datetime.timedelta`` above zero, or of zero or more
    with ``zero``; ``none_means`` says what ``None`` does where it is allowed.
    """
    if span is None and none_means:
        return ""
    if isinstance(span, datetime.timedelta) and (span > ZERO or (zero and span == ZERO)):
        return ""
    kind = "a datetime.timedelta of 0 or more" if zero else "a positive datetime.timedelta"
    or_none = f", or None {none_means}" if none_means else ""
    return f"must be {kind}{or_none}, not {span!r}"


def age(text: str) -> datetime.timedelta:
    """argparse type for an age such as ``30d``, ``12h`` or ``90m``."""
    match = _AGE.fullmatch(text.strip())
    if match is None or int(match["count"]) == 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: write a whole number above 0 and a unit, "
            "d (days), h (hours) or m (minutes), like 30d, 12h or 90m"
        )
    unit = _AGE_UNITS[match["unit"]]
    # Compared before it becomes a timedelta, which overflows past 999,999,999 days.
    if int(match["count"]) > MAX_AGE // datetime.timedelta(**{unit: 1}):
        raise argparse.ArgumentTypeError(
            f"{text!r} is longer than the {MAX_AGE.days} days (100 years) an age may "
            f"be, and no claim is that old; write at most {MAX_AGE.days}d"
        )
    return datetime.timedelta(**{unit: int(match["count"])})


def short(span: datetime.timedelta, parts: int = 1) -> str:
    """Write ``span`` in its ``parts`` largest units, rounded down: ``2 h 5 min``."""
    seconds = int(abs(span.total_seconds()))
    if seconds == 0:
        return "0 s"
    words: list[str] = []
    for unit, size in _UNITS:
        if seconds >= size and len(words) < parts:
            words.append(f"{seconds // size} {unit}")
            seconds %= size
        elif words:
            break  # Skip "1 h 5 s": the next unit down was empty.
    return " ".join(words)


def relative(moment: datetime.datetime, now: datetime.datetime) -> str:
    """Say when ``moment`` is, seen from ``now``: ``in 4 min`` or ``2 h ago``."""
    span = moment - now
    if abs(span) < datetime.timedelta(seconds=1):
        return gettext("now")
    if span > datetime.timedelta(0):
        return gettext("in %(span)s") % {"span": short(span)}
    return gettext("%(span)s ago") % {"span": short(span)}
