"""A schedule's expression read as its kind: a one-off, a fixed interval or a cron expression."""

from __future__ import annotations

from jobclaims.time.bounds import OneOff, is_one_off
from jobclaims.time.cron import CronSchedule
from jobclaims.time.fire_times import FireTimes
from jobclaims.time.intervals import IntervalSchedule, is_interval


def read(expression: str, time_zone: str | None = None) -> FireTimes:
    """``expression`` in ``time_zone`` (None: ``TIME_ZONE``): ``"at …"`` a
    one-off, ``"every …"`` an interval, anything else cron; ``ValueError``
    naming the fix."""
    if is_one_off(expression):
        return OneOff(expression, time_zone)
    if is_interval(expression):
        return IntervalSchedule(expression, time_zone)
    return CronSchedule(expression, time_zone)
