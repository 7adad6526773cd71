"""Whether each job is healthy, judged by the database's clock.

A job is healthy when

- its latest due window succeeded: the newest window that began at least a
  grace ago (``JOBCLAIMS["HEALTH_GRACE"]`` per job, one window by default),
  or a later one, has a succeeded run;
- its last finished run did not fail;
- none of its claims is expired: a holder that died leaves its claim
  ``running`` past its lease.

``jobclaims_status --check``, the django-health-check backend and the
Prometheus gauges all ask ``job_health()``, so they never disagree.

Windows no instance ever claimed (``missed_windows()``) are the runs lost
to a deploy, an outage or a broken crontab. A skip is visible
(``JobSkip``); a run that never started leaves no row at all, so the gaps
are found by listing the windows a job's schedule has had since its first
claim and taking away those that have a claim. A job with a ``schedule``
lists its fire times instead (``jobclaims.schedules.overview``).
"""

from __future__ import annotations

import datetime
from contextlib import suppress
from dataclasses import dataclass, field, replace

from django.utils import timezone

from jobclaims.clock import database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun, JobRunQuerySet
from jobclaims.scheduler import schedule_of
from jobclaims.schedules import JobOverview, JobSchedule, overview
from jobclaims.windows import from_name

#: At most this many failed runs in a row are counted.
FAILURES_COUNTED = 100


@dataclass(frozen=True)
class Due:
    """The window whose run should have succeeded by now."""

    window: str
    #: When the window began, and its run was due.
    due_at: datetime.datetime


def due_window(
    schedule: str, now: datetime.datetime, grace: datetime.timedelta | None
) -> Due | None:
    """The newest window of ``schedule`` that began at least ``grace`` before ``now``.

    ``schedule`` is what a claim records (``JobRun.schedule``: a window's
    name, "hourly" or "30-second"); ``grace`` None is one window, its longest
    (25 hours for "daily"). None when the schedule names no window. This is
    the one place that knows what a schedule is: a schedule of another kind
    plugs in here.
    """
    try:
        window = from_name(schedule)
    except ValueError:
        return None
    latest = now - (window.longest if grace is None else grace)
    key = window.key_at(latest)
    return Due(key, window.start_of(key))


@dataclass(frozen=True)
class JobHealth:
    """One job's health; ``problems`` says in words what is wrong, if anything."""

    job: str
    #: The due window that has not succeeded, if the job is overdue.
    overdue: Due | None = None
    #: The last finished run, if it failed.
    failed: JobRun | None = None
    #: How many finished runs failed since the last success (at most ``FAILURES_COUNTED``).
    failures_in_a_row: int = 0
    #: Claims still marked running whose lease ran out: their holder died.
    dead: list[JobRun] = field(default_factory=list)
    #: When a run of the job last succeeded.
    last_success: datetime.datetime | None = None

    @property
    def healthy(self) -> bool:
        return self.overdue is None and self.failed is None and not self.dead

    @property
    def kinds(self) -> list[str]:
        """What is wrong, in a word or two each: "overdue", "failed", "dead holder"."""
        return [
            kind
            for kind, wrong in (
                ("overdue", self.overdue is not None),
                ("failed", self.failed is not None),
                ("dead holder", bool(self.dead)),
            )
            if wrong
        ]

    @property
    def problems(self) -> list[str]:
        found = []
        if self.overdue is not None:
            last = _moment(self.last_success) if self.last_success else "never"
            found.append(
                f"overdue: the {self.overdue.window} window, due {_moment(self.overdue.due_at)}, "
                f"has not succeeded (last success: {last})"
            )
        if self.failed is not None:
            summary = self.failed.error.partition("\n")[0] or "no error recorded"
            found.append(
                f"failed: its last run, {self.failed.window}, failed "
                f"({self.failures_in_a_row} in a row): {summary}"
            )
        for run in self.dead:
            found.append(
                f"dead holder: the {run.window} claim of {run.owner} expired at "
                f"{_moment(run.expires_at)} without an outcome"
            )
        return found


def job_health(job: str | None = None) -> list[JobHealth]:
    """The health of ``job``, or of every job with a claim, by name."""
    runs = JobRun.objects.all()
    now = database_now(runs.db)
    if job is not None:
        jobs = [job]
    else:
        jobs = list(runs.order_by("job").values_list("job", flat=True).distinct())
    return [_health(runs.filter(job=name), name, now) for name in jobs]


def _health(runs: JobRunQuerySet, job: str, now: datetime.datetime) -> JobHealth:
    finished = list(runs.finished().order_by("-finished_at", "-pk")[:FAILURES_COUNTED])
    failures = next(
        (n for n, run in enumerate(finished) if run.status == JobRun.Status.SUCCEEDED),
        len(finished),
    )
    last_success = next(
        (run.finished_at for run in finished if run.status == JobRun.Status.SUCCEEDED),
        None,
    )
    if last_success is None:
        # Past the runs counted: one query for the newest success of all.
        newest = runs.filter(status=JobRun.Status.SUCCEEDED).order_by("-finished_at").first()
        last_success = newest.finished_at if newest else None
    return JobHealth(
        job=job,
        overdue=_overdue(runs, job, now),
        failed=finished[0] if failures else None,
        failures_in_a_row=failures,
        dead=list(runs.expired().order_by("claimed_at")),
        last_success=last_success,
    )


def _overdue(runs: JobRunQuerySet, job: str, now: datetime.datetime) -> Due | None:
    """The due window, unless it or a later one succeeded, or the job is newer."""
    newest = runs.exclude(schedule="").order_by("-claimed_at", "-pk").first()
    first = runs.order_by("claimed_at", "pk").first()
    if newest is None or first is None:
        return None
    due = due_window(newest.schedule, now, jobclaims_settings.health_grace(job))
    if due is None:
        return None
    window = from_name(newest.schedule)
    if window.start_of(window.key_at(first.claimed_at)) > due.due_at:
        return None  # The job's first claim came after the due window: it was not due yet.
    since = runs.filter(status=JobRun.Status.SUCCEEDED, finished_at__gte=due.due_at)
    for key in since.values_list("window", flat=True):
        try:
            if window.start_of(key) >= due.due_at:
                return None
        except ValueError:
            continue  # A key of a schedule the job had before this one.
    return due


def _moment(moment: datetime.datetime | None) -> str:
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S %Z}" if moment else "?"


#: The status command and the admin look back this many windows at most.
LOOK_BACK = 1000


def missed_windows(job: str) -> list[str]:
    """Keys of ``job``'s windows that ended unclaimed, oldest first.

    Looks from the job's oldest finished claim (or ``LOOK_BACK`` windows ago,
    if that is later) to the window now running by the database clock, which
    is not missed yet. Pruning deletes finished rows from the oldest on, so
    the oldest one left marks how far back the history is whole; a dead
    claim older than it is a straggler, not the start. Jobs whose claims
    recorded no schedule, or one that names no window, have no known windows.
    """
    if (scheduled := _scheduled(job)) is not None:
        # Each fire is a window: the schedule lists them, not a window name.
        db = jobclaims_settings.claims_database(JobRun)
        return overview(scheduled, database_now(db)).missed
    runs = JobRun.objects.filter(job=job).exclude(schedule="")
    oldest_first = runs.order_by("claimed_at")
    first = oldest_first.finished().first() or oldest_first.first()
    if first is None:
        return []
    try:
        window = from_name(first.schedule)
    except ValueError:
        # A schedule no window has (a window under a second was once
        # recorded as "0-second"): its windows cannot be listed.
        return []
    now = database_now(runs.db)
    start = first.claimed_at
    with suppress(OverflowError):  # A window so long that the look-back predates year 1.
        start = max(start, now - LOOK_BACK * window.longest)
    keys = window.keys_between(start, now)[-LOOK_BACK:]
    claimed = set(JobRun.objects.filter(job=job, window__in=keys).values_list("window", flat=True))
    return [key for key in keys if key not in claimed]


def _scheduled(job: str) -> JobSchedule | None:
    """``job``'s schedule, if its fires are windows of their own."""
    scheduled = schedule_of(job)
    return scheduled if scheduled is not None and scheduled.window is None else None


def checked_overview(job: JobSchedule, now: datetime.datetime) -> JobOverview:
    """``job``'s overview, with what is wrong with it, for the operators' views."""
    view = overview(job, now)
    if view.last_run is None:
        return view
    return replace(view, problems=job_health(job.job)[0].problems)
