"""Four hourly jobs, one in each health the monitoring tells apart, by the database clock."""

from __future__ import annotations

import datetime

from jobclaims.models import JobRun
from jobclaims.time.clock import database_now
from jobclaims.time.windows import resolve

HOUR = datetime.timedelta(hours=1)
SECOND = datetime.timedelta(seconds=1)
HOURLY = resolve("hourly")

#: The scheduled jobs of tests/testapp, which health knows before they run:
#: each schedule of a job with several is a job of its own.
SCHEDULED = (
    "always_fails",
    "nightly_all",
    "nightly_latest",
    "nightly_skip",
    "ny_open",
    "slow_charge",
    *(f"spread_calls[--call {call}]" for call in range(8)),
    "sync_regions[--region eu]",
    "sync_regions[--region us]",
    "tick",
)

#: Each job's name, and what its health says.
HEALTHY, OVERDUE, FAILING, DEAD = "healthy_job", "overdue_job", "failing_job", "dead_job"


def hour_start(moment: datetime.datetime) -> datetime.datetime:
    return HOURLY.start_of(HOURLY.key_at(moment))


def save_run(job: str, claimed_at: datetime.datetime, status: str, **fields: object) -> JobRun:
    """A claim of the hourly window ``claimed_at`` falls in, in ``status``."""
    finished = status != JobRun.Status.RUNNING
    columns: dict[str, object] = {
        "job": job,
        "window": HOURLY.key_at(claimed_at),
        "schedule": "hourly",
        "owner": "web-1:4242:0c0ffee0",
        "status": status,
        "claimed_at": claimed_at,
        "expires_at": claimed_at + 10 * 60 * SECOND,
        "finished_at": claimed_at + SECOND if finished else None,
    }
    return JobRun.objects.create(**{**columns, **fields})


def make_monitored_jobs() -> None:
    """The four jobs; each but the overdue one succeeded in the hour before this one.

    - healthy: succeeded last hour;
    - overdue: last succeeded three hours ago, nothing since;
    - failing: succeeded last hour, then failed in this one;
    - dead: succeeded last hour; this hour's holder died (its lease ran out).
    """
    now = database_now()
    this_hour = hour_start(now)
    last_hour = this_hour - HOUR
    for job in (HEALTHY, FAILING, DEAD):
        save_run(job, last_hour + SECOND, JobRun.Status.SUCCEEDED)
    save_run(OVERDUE, last_hour - 2 * HOUR + SECOND, JobRun.Status.SUCCEEDED)
    save_run(
        FAILING,
        this_hour,
        JobRun.Status.FAILED,
        finished_at=now,
        error="RuntimeError: the payment provider is down\n\nTraceback...",
    )
    save_run(DEAD, this_hour, JobRun.Status.RUNNING, expires_at=now - SECOND)
