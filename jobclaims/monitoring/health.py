"""Whether each job is healthy, judged by the database's clock.

The known jobs are those with a claim and the scheduled ones, which are in
the code. A job is healthy when

- its latest due window succeeded: the newest window that began at least a
  grace ago (``JOBCLAIMS["HEALTH_GRACE"]`` per job, one window by default),
  or a later one, has a succeeded run; a scheduled job's due window is its
  newest fire whose grace passed (``fire_grace()``);
- its last finished run did not fail;
- none of its claims is expired: a holder that died leaves its claim
  ``running`` past its lease;
- no window or fire of the look-back ended with neither claim nor skip;
- no run going on is slow: running more than ``SLOW_FACTOR`` times the
  median of the job's latest successes, and more than ``SLOW_MINIMUM``
  (``slow_runs()``);
- for a scheduled job, a scheduler running it was seen lately, and the live
  ones (those not stopped) agree on its schedule's fires (``SchedulerSeen``).

A scheduled job's fires count from when its schedule came into force, as
the scheduler counts them (``ScheduleVersion``): a fire from before was
never due, so it is neither overdue nor missed. A job that a scheduler once
ran and that neither the code nor a live scheduler has any more is gone
from the code: listed apart (``Health.gone``), not judged.

``jobclaims_status --check``, the django-health-check backend and the
Prometheus gauges all ask ``read_health()``, so they never disagree; it
reads the same few queries whatever the number of jobs
(``jobclaims.monitoring.health_reads``).

Windows no instance ever claimed (``missed_windows()``) are the runs lost
to a deploy, an outage or a broken crontab. A skip is visible
(``JobSkip``); a run that never started leaves no row at all, so the gaps
are found by listing the windows a job's schedule has had since its first
claim and taking away those that have a claim. A job with a ``schedule``
lists its fire times instead (``jobclaims.monitoring.overview.overview``).
"""

from __future__ import annotations

import datetime
import functools
import statistics
import zoneinfo
from collections.abc import Callable, Collection
from contextlib import suppress
from dataclasses import dataclass, field, replace

from django.utils import timezone

from jobclaims.conf import jobclaims_settings
from jobclaims.jobs.discovery import schedule_of
from jobclaims.jobs.schedules import ON_TIME, JobSchedule
from jobclaims.models import JobRun, SchedulerSeen
from jobclaims.monitoring import health_reads
from jobclaims.monitoring.overview import JobOverview, overview
from jobclaims.scheduling import retention, seen
from jobclaims.time import durations
from jobclaims.time.clock import database_now
from jobclaims.time.slots import Slots

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
    (25 hours for "daily"). None when the schedule names no window.
    """
    window = Slots.recorded(schedule).window
    if window is None:
        return None
    latest = now - (window.longest if grace is None else grace)
    key = window.key_at(latest)
    return Due(key, window.start_of(key))


@dataclass(frozen=True)
class SchedulerProblem:
    """What is wrong with the schedulers that run a job, in words."""

    #: "no live scheduler" or "hosts disagree".
    kind: str
    detail: str


#: A run is slow past this many times the median of its job's latest successes...
SLOW_FACTOR = 3
#: ... and past this long, so that a job of a few seconds is not slow at ten.
SLOW_MINIMUM = datetime.timedelta(minutes=1)
#: A job with fewer successes than this has no usual duration yet.
SLOW_NEEDS_SUCCESSES = 3


@dataclass(frozen=True)
class SlowRun:
    """A run going on far longer than its job's runs usually take."""

    run: JobRun
    #: How long it has run, by the database clock.
    running_for: datetime.timedelta
    #: The median duration of the job's latest successes.
    usual: datetime.timedelta


def slow_runs(
    running: list[JobRun], durations: list[datetime.timedelta], now: datetime.datetime
) -> list[SlowRun]:
    """The runs of ``running`` that are slow, judged from their job's latest
    successes' ``durations``.

    A median, not a mean or a maximum: one run that once hung does not make
    hanging usual. ``max_run_time`` needs no rule of its own here: past it
    the lease stops renewing, and the run is a dead holder when it ends.
    """
    if len(durations) < SLOW_NEEDS_SUCCESSES:
        return []
    usual = datetime.timedelta(seconds=statistics.median(d.total_seconds() for d in durations))
    limit = max(SLOW_FACTOR * usual, SLOW_MINIMUM)
    return [
        SlowRun(run, now - run.claimed_at, usual) for run in running if now - run.claimed_at > limit
    ]


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
    #: Keys of the fires or windows of the look-back that no instance claimed.
    missed: list[str] = field(default_factory=list)
    #: Whether the job's schedule is in the code (``JobCommand.schedule``).
    scheduled: bool = False
    #: No scheduler is live, or the live ones run different schedules.
    schedulers: SchedulerProblem | None = None
    #: Runs going on far longer than the job's usual duration (``slow_runs()``).
    slow: list[SlowRun] = field(default_factory=list)
    #: The zone of a schedule read in a zone of its own (``time_zone``), which
    #: its times are shown in; None: ``TIME_ZONE``, as every other time.
    time_zone: str | None = None

    @property
    def healthy(self) -> bool:
        return not self.kinds

    @property
    def kinds(self) -> list[str]:
        """What is wrong, in a word or two each: "overdue", "failed", "missed", ..."""
        return [
            kind
            for kind, wrong in (
                ("overdue", self.overdue is not None),
                ("failed", self.failed is not None),
                ("dead holder", bool(self.dead)),
                ("missed", bool(self.missed)),
                ("slow", bool(self.slow)),
                (self.schedulers.kind if self.schedulers else "", self.schedulers is not None),
            )
            if wrong
        ]

    @property
    def problems(self) -> list[str]:
        found = []
        if self.overdue is not None:
            zone = self.time_zone
            last = _moment(self.last_success, zone) if self.last_success else "never"
            found.append(
                f"overdue: the {self.overdue.window} window, due "
                f"{_moment(self.overdue.due_at, zone)}, has not succeeded (last success: {last})"
            )
        if self.failed is not None:
            summary = self.failed.error.partition("\n")[0] or "no error recorded"
            ended = "timed out" if self.failed.status == JobRun.Status.TIMED_OUT else "failed"
            found.append(
                f"failed: its last run, {self.failed.window}, {ended} "
                f"({self.failures_in_a_row} in a row): {summary}"
            )
        for run in self.dead:
            found.append(
                f"dead holder: the {run.window} claim of {run.owner} expired at "
                f"{_moment(run.expires_at)} without an outcome"
            )
        if self.missed:
            shown = ", ".join(self.missed[-3:])
            found.append(
                f"missed: {len(self.missed)} of its windows in the last "
                f"{durations.short(jobclaims_settings.missed_look_back)} had no claim "
                f"(latest: {shown})"
            )
        for slow in self.slow:
            found.append(
                f"slow: the {slow.run.window} run of {slow.run.owner} has run for "
                f"{durations.short(slow.running_for)}, over {SLOW_FACTOR} times its usual "
                f"{durations.short(slow.usual)}"
            )
        if self.schedulers is not None:
            found.append(f"{self.schedulers.kind}: {self.schedulers.detail}")
        return found


@dataclass(frozen=True)
class GoneJob:
    """A job gone from the code: a command of some deploy's, that nothing runs now.

    Health does not watch it, so it is neither overdue nor missed; its
    claims stay, and it is watched again as soon as the code or a live
    scheduler has it again (``health_reads.Facts.is_gone()``).
    """

    job: str
    #: When it was last claimed, by the database clock.
    last_claimed: datetime.datetime
    #: The schedule a scheduler last recorded for it; "" for a job only
    #: ever started by cron or by hand (``KnownCommand``).
    schedule: str

    @property
    def said(self) -> str:
        schedule = f"last schedule {self.schedule!r}, " if self.schedule else ""
        return (
            f"gone from the code: no JobCommand and no live scheduler runs it "
            f"({schedule}last claimed {_moment(self.last_claimed)}); not watched"
        )


@dataclass(frozen=True)
class Health:
    """The jobs' health, and the schedulers seen running them."""

    jobs: list[JobHealth]
    #: Schedulers seen within ``JOBCLAIMS["SCHEDULER_GRACE"]`` and not stopped,
    #: oldest started first.
    live_schedulers: list[SchedulerSeen]
    #: Those stopped or seen before, whose rows are not forgotten yet.
    gone_schedulers: list[SchedulerSeen]
    #: Jobs gone from the code, which health does not watch, by name.
    gone: list[GoneJob] = field(default_factory=list)


def read_health(job: str | Collection[str] | None = None) -> Health:
    """The health of ``job`` (a name, or several), or of every known job by
    name: those with a claim, and the scheduled ones, which are in the code;
    and the schedulers'.

    An unknown job has no health: it is left out. The reads are the same few
    whatever the number of jobs (``jobclaims.monitoring.health_reads``).
    """
    facts = health_reads.read([job] if isinstance(job, str) else job)
    live = facts.live_schedulers()
    return Health(
        jobs=[_health(facts, name) for name in facts.known_jobs()],
        live_schedulers=live,
        gone_schedulers=[row for row in facts.seen if row not in live],
        gone=_gone(facts),
    )


def gone_jobs() -> list[GoneJob]:
    """``read_health()``'s gone jobs, read for the jobs that may be gone
    alone: the admin shows them above every list of claims."""
    candidates = health_reads.gone_candidates()
    return _gone(health_reads.read(candidates)) if candidates else []


def _gone(facts: health_reads.Facts) -> list[GoneJob]:
    return [
        GoneJob(
            name,
            facts.summaries[name].newest_claimed,
            version.schedule if (version := facts.versions.get(name)) else "",
        )
        for name in facts.gone_jobs()
    ]


def job_health(job: str | None = None) -> list[JobHealth]:
    """The health of ``job``, or of every known job: ``read_health()``'s jobs."""
    return read_health(job).jobs


def _health(facts: health_reads.Facts, job: str) -> JobHealth:
    summary = facts.summaries.get(job)
    scheduled = facts.scheduled.get(job)
    failed = facts.failed.get(job)
    return JobHealth(
        job=job,
        overdue=_overdue(facts, job),
        failed=failed,
        failures_in_a_row=min(facts.failures_in_a_row.get(job, 0), FAILURES_COUNTED)
        if failed
        else 0,
        dead=facts.dead.get(job, []),
        time_zone=scheduled.cron.time_zone if scheduled else None,
        last_success=summary.last_success if summary else None,
        missed=facts.missed.get(job, []),
        scheduled=scheduled is not None,
        schedulers=_schedulers(facts, scheduled) if scheduled else None,
        slow=slow_runs(facts.running.get(job, []), facts.durations.get(job, []), facts.now),
    )


def _overdue(facts: health_reads.Facts, job: str) -> Due | None:
    """The due window, unless it or a later one succeeded, or the job is newer."""
    scheduled = facts.scheduled.get(job)
    if scheduled is not None:
        return _overdue_fire(facts, scheduled)
    newest = facts.newest.get(job)
    summary = facts.summaries.get(job)
    if newest is None or summary is None or not newest.schedule:
        return None
    grace = jobclaims_settings.health_grace(job)
    if grace is None and job == retention.RETENTION_JOB:
        grace = retention.health_grace()
    found = _due_and_end(newest.schedule, facts.now, grace, facts.zone)
    if found is None:
        return None
    due, due_ends = found
    if summary.first_claimed >= due_ends:
        return None  # The job's first claim came after the due window: it was not due yet.
    success = facts.newest_success.get(job)
    if success is not None and _starts_by(
        Slots.recorded(newest.schedule).start_of, success.window, due.due_at
    ):
        return None
    return due


@functools.lru_cache(maxsize=64)
def _due_and_end(
    schedule: str, now: datetime.datetime, grace: datetime.timedelta | None, zone: str
) -> tuple[Due, datetime.datetime] | None:
    """``due_window()``, and when that window ends: the same for every job of
    one schedule and grace in one read (in ``zone``, the keys' time zone)."""
    due = due_window(schedule, now, grace)
    if due is None:
        return None
    _start, end = Slots.recorded(schedule).bounds(due.window)
    return due, end


def _overdue_fire(facts: health_reads.Facts, job: JobSchedule) -> Due | None:
    """The due fire of a scheduled job, unless a run of it or a later one succeeded."""
    fire = due_fire(job, facts.now, jobclaims_settings.health_grace(job.job))
    since = facts.in_force_since(job)
    if fire is None or since is None or fire < since:
        return None  # A fire from before its schedule came into force was never due.
    slots = job.slots
    key = slots.key_at(fire)
    success = facts.newest_success.get(job.job)
    if success is not None and _starts_by(slots.start_of, success.window, slots.start_of(key)):
        return None
    return Due(key, fire)


def _starts_by(
    start_of: Callable[[str], datetime.datetime], key: str, due_at: datetime.datetime
) -> bool:
    """Whether the window ``key`` began at or after ``due_at``."""
    try:
        return start_of(key) >= due_at
    except ValueError:
        return False  # A key of a schedule the job had before this one.


#: A scheduled job's fire has at most this long to succeed by default, or
#: its lease if that is longer: what a monthly job needs, and more than a
#: job fired every few seconds does.
LONGEST_DEFAULT_GRACE = datetime.timedelta(hours=1)


def fire_grace(job: JobSchedule, fire: datetime.datetime) -> datetime.timedelta:
    """How long ``fire``'s run has to succeed, unless ``HEALTH_GRACE`` says.

    The time to the next fire, at least ``ON_TIME`` (a fire every 5 seconds
    has a minute) and at most an hour or the job's lease, whichever is
    longer (a monthly job has an hour, or its lease).
    """
    upper = max(LONGEST_DEFAULT_GRACE, job.lease)
    following = next(job.cron.fires_after(fire), None)
    gap = upper if following is None else following - fire
    return max(ON_TIME, min(gap, upper))


def due_fire(
    job: JobSchedule, now: datetime.datetime, grace: datetime.timedelta | None
) -> datetime.datetime | None:
    """The newest fire of ``job`` whose grace has passed by ``now``."""
    if grace is not None:
        return job.cron.latest_fire(now - grace)
    for fire in job.cron.fires_before(now):
        if fire + fire_grace(job, fire) <= now:
            return fire
    return None


def _schedulers(facts: health_reads.Facts, job: JobSchedule) -> SchedulerProblem | None:
    """Whether a live scheduler runs ``job``, and whether the live ones agree on it.

    Judged for each job alone, whatever else runs: in a half-rolled deploy
    the live schedulers still run the code before it, and a job new in this
    code has none. A scheduler started with ``--job`` runs only some jobs:
    one that does not run ``job`` neither keeps it alive nor disagrees about
    it. A job that no scheduler ever ran has ``SCHEDULER_GRACE`` from its
    deploy or its first claim for one to start; a job nothing ever deployed,
    claimed or ran has not started yet.
    """
    running = [row for row in facts.seen if job.job in row.schedules]
    grace = jobclaims_settings.scheduler_grace
    if not running:
        since = facts.unrun_since(job.job)
        if since is None or facts.now - since < grace:
            return None  # Not started yet, or its deploy still has the grace to start it.
        return SchedulerProblem(
            "no live scheduler", f"no scheduler has been seen running it since {_moment(since)}"
        )
    if not any(job.job in row.schedules for row in facts.recent_schedulers()):
        newest = max(running, key=lambda row: row.last_seen_at)
        return SchedulerProblem(
            "no live scheduler",
            f"none seen for {durations.short(grace)}; the last, {newest}, "
            f"at {_moment(newest.last_seen_at)}",
        )
    # Only the schedulers running now speak; two spellings of one schedule's
    # fires ("*/3", "0-59/3") agree.
    live = [row for row in facts.live_schedulers() if job.job in row.schedules]
    schedules = {f"{row}": str(row.schedules[job.job]) for row in live}
    if len({seen.fires_of(each) for each in schedules.values()}) > 1:
        said = ", ".join(f"{where} runs {each!r}" for where, each in sorted(schedules.items()))
        return SchedulerProblem("hosts disagree", said)
    return None


def _moment(moment: datetime.datetime | None, zone: str | None = None) -> str:
    """``moment`` as a local time in ``zone`` (with the zone's name), else in ``TIME_ZONE``."""
    if not moment:
        return "?"
    if zone is None:
        return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S %Z}"
    return f"{moment.astimezone(zoneinfo.ZoneInfo(zone)):%Y-%m-%d %H:%M:%S %Z} ({zone})"


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
        return overview(scheduled, database_now(db), fires=LOOK_BACK).missed
    runs = JobRun.objects.filter(job=job).exclude(schedule="")
    oldest_first = runs.order_by("claimed_at")
    first = oldest_first.finished().first() or oldest_first.first()
    if first is None:
        return []
    window = Slots.recorded(first.schedule).window
    if window is None:
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
