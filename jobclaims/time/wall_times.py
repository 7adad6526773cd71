"""Wall times in the project's time zone: one instant for each text, one text for each instant.

A key, an operator's ``--window`` and ``jobclaims_pause --until`` are wall
times, ISO 8601, in ``TIME_ZONE`` unless they carry an offset. A wall time
that a daylight-saving change skips or repeats is read the way Python reads
it (``fold=0``): one skipped by a spring-forward change with the offset
before the change, so 02:30 on the night New York skips from 02:00 to 03:00
is 03:30 daylight time; one repeated by a fall-back change as its first
occurrence. An operator who means the second 01:30 writes its offset:
``2026-11-01T01:30-05:00``.

The project's zone is ``TIME_ZONE`` itself, never the zone a request
activated (Django's ``timezone.activate()``, a user's zone set by a
middleware): a claim made in a view, or an operator's "Run now" in the
admin, must name the slot a scheduler or cron names, or one hour would be
two windows, ``…T20:00+00:00`` and ``…T05:00+09:00``, and run twice.
"""

from __future__ import annotations

import datetime
import zoneinfo

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

UTC = datetime.timezone.utc


def parse(text: str, zone: datetime.tzinfo | None = None) -> datetime.datetime:
    """An ISO 8601 date or date-time, read the same on every Python version
    (3.10's ``fromisoformat`` refuses ``Z`` and short fractions of seconds).

    One without an offset is a wall time in ``zone``, by default the
    project's, read by the rule above."""
    try:
        moment = parse_datetime(text)
    except ValueError as error:
        # Its words, not the repr of the timedelta it could not make.
        if "offset" in str(error):
            raise ValueError(
                f"{text!r} has a UTC offset of 24 hours or more; an offset is "
                "between -23:59 and +23:59"
            ) from None
        raise ValueError(f"{text!r} is not a date-time: {error}") from None
    if moment is None and (day := parse_date(text)) is not None:
        moment = datetime.datetime.combine(day, datetime.time())
    if moment is None:
        raise ValueError(f"{text!r} is not an ISO 8601 date or date-time")
    return aware(moment, zone)


def project_zone() -> datetime.tzinfo:
    """``TIME_ZONE``, whatever zone is active (see above)."""
    return timezone.get_default_timezone()


def project_zone_name() -> str:
    """The name of ``project_zone()``."""
    return timezone.get_default_timezone_name()


def local(moment: datetime.datetime) -> datetime.datetime:
    """``moment`` in the project's time zone, by way of UTC.

    ``astimezone()`` of a datetime already in the zone returns it as it is,
    even a wall time that does not exist, whose key would then name an hour
    no scheduled run has. Through UTC every instant has one wall time.
    """
    return moment.astimezone(UTC).astimezone(project_zone())


def aware(moment: datetime.datetime, zone: datetime.tzinfo | None = None) -> datetime.datetime:
    """``moment``, a wall time in ``zone`` (by default the project's) if it is naive."""
    if timezone.is_naive(moment):
        return timezone.make_aware(moment, zone or project_zone())
    return moment


def canonical(start: datetime.datetime) -> str:
    """The one key of a window or fire starting at ``start``, a local time:
    to the minute, with seconds only where they are not zero.

    One spelling per instant: ``timedelta(hours=1)`` and ``"hourly"`` name
    the same hour ``2026-12-01T20:00+00:00``, and a schedule that gains a
    seconds field keys its fires as before.
    """
    return start.isoformat("T", "seconds" if start.second else "minutes")


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
