"""What health reads from the database: the same few queries whatever the
number of jobs, so that a scrape of a thousand jobs costs what one does.

Each read covers every job at once (an aggregate per job, then the few
rows the aggregates point at), and ``jobclaims.monitoring.health`` judges each job
from these facts in Python. docs/performance.md has the measured cost.
"""

from __future__ import annotations

import bisect
import datetime
import functools
import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import or_
from typing import NamedTuple, cast

from django.db.models import Count, F, Max, Min, Q, Window
from django.db.models.functions import RowNumber

from jobclaims.conf import jobclaims_settings
from jobclaims.jobs.discovery import command_jobs, every_schedule
from jobclaims.jobs.schedules import ON_TIME, JobSchedule
from jobclaims.models import (
    JobRun,
    JobRunQuerySet,
    JobSkip,
    KnownCommand,
    RetiredJob,
    SchedulerSeen,
    ScheduleVersion,
)
from jobclaims.scheduling import retention
from jobclaims.scheduling.schedule_versions import fingerprint_of
from jobclaims.time import wall_times
from jobclaims.time.clock import EpochMicroseconds, database_now, from_epoch_microseconds
from jobclaims.time.slots import Slots

#: Health counts at most this many missed fires or windows per job.
MISSED_COUNTED = 1000

#: A running job's usual duration is judged from at most this many of its
#: latest successes.
DURATIONS_COUNTED = 20

SUCCEEDED = Q(status=JobRun.Status.SUCCEEDED)
#: A timed-out run is a failure too (``jobclaims.running.timeouts``); a cancelled one is not.
FAILED = Q(status__in=[JobRun.Status.FAILED, JobRun.Status.TIMED_OUT])


@dataclass(frozen=True)
class Summary:
    """One job's claims, aggregated."""

    first_claimed: datetime.datetime
    newest_claimed: datetime.datetime
    newest_success_claimed: datetime.datetime | None
    last_success: datetime.datetime | None
    last_failure: datetime.datetime | None

    @property
    def failing(self) -> bool:
        """Whether the job's last finished run failed."""
        if self.last_failure is None:
            return False
        return self.last_success is None or self.last_failure > self.last_success


class Newest(NamedTuple):
    """Of a job's newest claim, what health judges by: a tuple, not a
    ``JobRun``, because a thousand jobs' models cost more than the query."""

    window: str
    schedule: str


@dataclass
class Facts:
    """Everything health needs to know of the jobs, read at ``now``."""

    now: datetime.datetime
    #: Only these jobs, if given.
    only: frozenset[str] | None
    #: The scheduled jobs in the code, by job name.
    scheduled: dict[str, JobSchedule]
    #: The names of every ``JobCommand`` in the code, scheduled or not.
    in_code: set[str] = field(default_factory=set)
    #: The commands some deploy's code had, recorded by ``migrate``
    #: (``KnownCommand``), with when a deploy first recorded each.
    known_commands: dict[str, datetime.datetime] = field(default_factory=dict)
    summaries: dict[str, Summary] = field(default_factory=dict)
    #: The current time zone's name, which window keys are read in: looked
    #: up once, because each lookup costs more than judging a job.
    zone: str = ""
    #: Each job's newest claim, and its newest succeeded one.
    newest: dict[str, Newest] = field(default_factory=dict)
    newest_success: dict[str, Newest] = field(default_factory=dict)
    #: The last run of each job whose last finished run failed, and how
    #: many failed since its last success.
    failed: dict[str, JobRun] = field(default_factory=dict)
    failures_in_a_row: dict[str, int] = field(default_factory=dict)
    dead: dict[str, list[JobRun]] = field(default_factory=dict)
    #: Claims whose holder's lease holds: runs going on now.
    running: dict[str, list[JobRun]] = field(default_factory=dict)
    #: How long the latest successes of each job that is running took, newest first.
    durations: dict[str, list[datetime.timedelta]] = field(default_factory=dict)
    seen: list[SchedulerSeen] = field(default_factory=list)
    #: The jobs operators retired, by job name.
    retired: dict[str, RetiredJob] = field(default_factory=dict)
    #: Keys of the look-back's fires or windows that no instance claimed.
    missed: dict[str, list[str]] = field(default_factory=dict)
    #: Each job's newest schedule a scheduler recorded (``ScheduleVersion``).
    versions: dict[str, ScheduleVersion] = field(default_factory=dict)

    def known_jobs(self) -> list[str]:
        """Jobs with a claim, and scheduled jobs, which are in the code, and a
        command of the code asked for by name, though it never ran; but not
        those retired, unless claimed since, nor those gone from the code, nor
        the history's retention while it is off."""
        asked = self.only & self.in_code if self.only is not None else set()
        known = sorted({*self.summaries, *self.scheduled, *asked})
        return [
            job
            for job in known
            if self.wants(job)
            and not self.is_retired(job)
            and not self.is_gone(job)
            and not (job == retention.RETENTION_JOB and not retention.enabled())
        ]

    def gone_jobs(self) -> list[str]:
        """Jobs with claims that are gone from the code (``is_gone()``), unless retired."""
        return [
            job
            for job in sorted(self.summaries)
            if self.wants(job) and not self.is_retired(job) and self.is_gone(job)
        ]

    def wants(self, job: str) -> bool:
        """Whether ``job`` is one of those read for."""
        return self.only is None or job in self.only

    def is_gone(self, job: str) -> bool:
        """Whether ``job`` was a command once and nothing runs it any more.

        A scheduler recorded its schedule, or ``migrate`` its command, so it
        was a ``JobCommand`` of some deploy's code; it is none of the code
        health runs with; no live scheduler runs it (in a rolling deploy the
        hosts still on the old code do, and it is watched until the last of
        them stops); and no run of it holds its lease. Jobs claimed through
        ``claim()``, ``@claimed`` or Celery cannot be listed from the code,
        and are never gone: an operator retires them.
        """
        was_a_command = job in self.versions or job in self.known_commands
        if not was_a_command or job in self.in_code or job in self.running:
            return False
        return not any(job in row.schedules for row in self.recent_schedulers())

    def live_schedulers(self) -> list[SchedulerSeen]:
        """The schedulers running: seen within ``JOBCLAIMS["SCHEDULER_GRACE"]``,
        and not stopped. One that stopped cleanly is gone at once."""
        return [row for row in self.seen if row.live_at(self.now)]

    def recent_schedulers(self) -> list[SchedulerSeen]:
        """The schedulers seen within ``JOBCLAIMS["SCHEDULER_GRACE"]``, stopped
        or not: a job one of them ran is not left without a scheduler while a
        host restarts its scheduler, nor between a crontab's ``--once`` runs."""
        oldest = self.now - jobclaims_settings.scheduler_grace
        return [row for row in self.seen if row.last_seen_at >= oldest]

    def in_force_since(self, job: JobSchedule) -> datetime.datetime | None:
        """When ``job``'s schedule, as the code has it, came into force: when
        a scheduler first looked at it (``jobclaims.scheduling.schedule_versions``).

        A job no scheduler has looked at yet is new: its fires count from
        ``SCHEDULER_GRACE`` after its code was deployed (``deployed_due()``).
        None when another schedule was recorded since: a scheduler with this
        code would take it as new when it looks, and catch up none of the
        fires before.
        """
        version = self.versions.get(job.job)
        if version is None:
            return self.deployed_due(job.job)
        if version.fingerprint != fingerprint_of(job):
            return None
        return version.since

    def deployed_due(self, job: str) -> datetime.datetime | None:
        """When the fires of ``job``, a scheduled job no scheduler has looked
        at, become due: ``SCHEDULER_GRACE`` after a deploy's ``migrate``
        recorded its command, the time a rolling deploy has to start a
        scheduler that runs it.

        A deploy whose schedulers never run the job (they still run the code
        before it: a half-rolled deploy) leaves its fires unrun, and they are
        overdue and missed as any others. None once a scheduler runs it (it
        puts the schedule in force at its first look, which its first fire
        brings), or when no deploy recorded the command.
        """
        deployed = self.known_commands.get(job)
        if deployed is None or job in self.scheduled_somewhere:
            return None
        return deployed + jobclaims_settings.scheduler_grace

    @functools.cached_property
    def scheduled_somewhere(self) -> frozenset[str]:
        """The jobs some scheduler seen, live or not, runs."""
        return frozenset(job for row in self.seen for job in row.schedules)

    def unrun_since(self, job: str) -> datetime.datetime | None:
        """Since when a scheduler should have been running ``job``, a scheduled
        job no scheduler was seen running: the earlier of when a deploy
        recorded its command and its first claim; None when neither is
        known, and nothing has started it yet."""
        moments = [self.known_commands.get(job)]
        if (summary := self.summaries.get(job)) is not None:
            moments.append(summary.first_claimed)
        return min((moment for moment in moments if moment is not None), default=None)

    def is_retired(self, job: str) -> bool:
        """Whether ``job`` was retired and has not been claimed since."""
        retired = self.retired.get(job)
        if retired is None:
            return False
        summary = self.summaries.get(job)
        return summary is None or summary.newest_claimed <= retired.retired_at

    def known_since(self, job: str) -> datetime.datetime | None:
        """Since when ``job`` is known to run: its first claim, or the start
        of the first scheduler seen running it."""
        moments = [row.started_at for row in self.seen if job in row.schedules]
        if (summary := self.summaries.get(job)) is not None:
            moments.append(summary.first_claimed)
        return min(moments, default=None)


def read(only: Collection[str] | None = None) -> Facts:
    """The facts of every job (of ``only``, if given), in a bounded number of queries."""
    db = jobclaims_settings.claims_database(JobRun)
    wanted = None if only is None else frozenset(only)
    runs = JobRun.objects.all() if wanted is None else JobRun.objects.filter(job__in=wanted)
    facts = Facts(
        now=database_now(db),
        only=wanted,
        scheduled={},
        in_code=command_jobs(),
        zone=wall_times.project_zone_name(),
    )
    facts.scheduled = {job: each for job, each in scheduled().items() if facts.wants(job)}
    facts.retired = {row.job: row for row in RetiredJob.objects.all()}
    facts.known_commands = dict(KnownCommand.objects.values_list("job", "first_seen_at"))
    versions = ScheduleVersion.objects.order_by("job", "since", "pk")
    # Ordered by since: the newest of each job is the one kept.
    facts.versions = {row.job: row for row in versions if facts.wants(row.job)}
    facts.seen = list(SchedulerSeen.objects.order_by("started_at", "pk"))
    failed = _failed(facts)
    facts.summaries = _summaries(runs, failed)
    _read_newest(facts, runs)
    _read_failures(facts, runs, failed)
    _read_running(facts, runs)
    _read_missed(facts)
    return facts


def gone_candidates() -> set[str]:
    """The jobs some deploy's code had as commands and this code has not:
    those that may be gone, read for without judging every job."""
    recorded = {*KnownCommand.objects.values_list("job", flat=True)}
    recorded |= {*ScheduleVersion.objects.values_list("job", flat=True)}
    return recorded - command_jobs()


def scheduled(only: str | None = None) -> dict[str, JobSchedule]:
    """The scheduled jobs (``only``, if given), by job name: the code's
    usable ones and the stored ones (check W005 names the others)."""
    return {job.job: job for job in every_schedule()[0] if only in (None, job.job)}


def _failed(facts: Facts) -> Q:
    """The rows that are failures: failed or timed out, and settled.

    A scheduler's job records its failure itself, then the scheduler that
    started it settles the fire by the job's retry policy
    (``jobclaims.running.attempts``): ``retrying``, or failed for good, and
    either way it counts the failure, or it hands an interrupted fire off.
    Between the two writes the row says failed of a fire that may yet
    succeed. So a row is no failure yet while its scheduler has to settle
    it: its owner is a live scheduler (the scheduler claims the fire, and
    its job adopts the claim), it finished within ``SCHEDULER_GRACE``, and
    its failures do not count it yet (a fire failed for good counts one
    more than the job's retries). Every reader asks health, so none sees
    such a row as a failure, at any instant. A scheduler that dies before
    it settles leaves the row a failure once it is no longer live.
    """
    live = facts.live_schedulers()
    if not live or not facts.scheduled:
        return FAILED
    by_retries: dict[int, list[str]] = {}
    for name, job in facts.scheduled.items():
        by_retries.setdefault(job.retry.retries, []).append(name)
    # A claim's owner starts with its process's host and pid, as the seen row records them.
    owned = reduce(or_, (Q(owner__startswith=f"{row.host[:200]}:{row.pid}:") for row in live))
    uncounted = reduce(
        or_, (Q(job__in=jobs, failures__lte=retries) for retries, jobs in by_retries.items())
    )
    recent = Q(finished_at__gte=facts.now - jobclaims_settings.scheduler_grace)
    return FAILED & ~(owned & uncounted & recent)


def _summaries(runs: JobRunQuerySet, failed: Q) -> dict[str, Summary]:
    """Each job's claims, aggregated; the moments read as microseconds
    (``EpochMicroseconds``): five per job, which as datetimes cost a scrape
    of a thousand jobs more than its SQL."""
    rows = (
        runs.order_by()
        .values("job")
        .annotate(
            first_claimed=EpochMicroseconds(Min("claimed_at")),
            newest_claimed=EpochMicroseconds(Max("claimed_at")),
            newest_success_claimed=EpochMicroseconds(Max("claimed_at", filter=SUCCEEDED)),
            last_success=EpochMicroseconds(Max("finished_at", filter=SUCCEEDED)),
            last_failure=EpochMicroseconds(Max("finished_at", filter=failed)),
        )
        .values_list(
            "job",
            "first_claimed",
            "newest_claimed",
            "newest_success_claimed",
            "last_success",
            "last_failure",
        )
    )
    moment = from_epoch_microseconds
    return {
        job: Summary(
            cast(datetime.datetime, moment(first)),  # A job's rows have a claim time.
            cast(datetime.datetime, moment(newest)),
            moment(newest_success),
            moment(last_success),
            moment(last_failure),
        )
        for job, first, newest, newest_success, last_success, last_failure in rows
    }


def _read_newest(facts: Facts, runs: JobRunQuerySet) -> None:
    """Each job's newest claim and newest success: the rows at the claim
    times the aggregates found (a time two jobs share brings both)."""
    moments = {
        moment
        for summary in facts.summaries.values()
        for moment in (summary.newest_claimed, summary.newest_success_claimed)
        if moment is not None
    }
    if not moments:
        return
    rows = runs.filter(claimed_at__in=moments).order_by("pk")
    for job, claimed, status, window, schedule in rows.values_list(
        "job", EpochMicroseconds("claimed_at"), "status", "window", "schedule"
    ):
        summary = facts.summaries.get(job)
        if summary is None:
            continue  # Claimed since the aggregate was read.
        claimed_at = from_epoch_microseconds(claimed)
        if claimed_at == summary.newest_claimed:
            facts.newest[job] = Newest(window, schedule)
        succeeded = status == JobRun.Status.SUCCEEDED
        if succeeded and claimed_at == summary.newest_success_claimed:
            facts.newest_success[job] = Newest(window, schedule)


def _read_failures(facts: Facts, runs: JobRunQuerySet, failed: Q) -> None:
    """The last failed run of each failing job, and its failures since its
    last success; ``failed`` says which rows are failures (``_failed()``)."""
    failing = {job: summary for job, summary in facts.summaries.items() if summary.failing}
    if not failing:
        return
    last = runs.filter(
        failed,
        job__in=failing,
        finished_at__in={summary.last_failure for summary in failing.values()},
    )
    for run in last.order_by("pk"):
        if run.finished_at == failing[run.job].last_failure:
            facts.failed[run.job] = run
    since_success = reduce(
        or_,
        (
            Q(job=job, finished_at__gt=summary.last_success)
            if summary.last_success is not None
            else Q(job=job)
            for job, summary in failing.items()
        ),
    )
    counts = runs.filter(failed).filter(since_success).order_by().values("job")
    for row in counts.annotate(failures=Count("pk")):
        facts.failures_in_a_row[row["job"]] = row["failures"]


def _read_running(facts: Facts, runs: JobRunQuerySet) -> None:
    """The runs still marked running, in one read: those whose lease holds at
    ``facts.now`` are going on, the others' holders died. Then how long the
    jobs going on took when they last succeeded: the newest
    ``DURATIONS_COUNTED`` successes of each, in one query."""
    for run in runs.running().order_by("claimed_at", "pk"):
        held = facts.running if run.expires_at > facts.now else facts.dead
        held.setdefault(run.job, []).append(run)
    if not facts.running:
        return
    latest = (
        runs.filter(SUCCEEDED, job__in=facts.running, finished_at__isnull=False)
        .annotate(
            newness=Window(
                RowNumber(), partition_by=F("job"), order_by=[F("finished_at").desc(), F("pk")]
            )
        )
        .filter(newness__lte=DURATIONS_COUNTED)
        .order_by("job", "newness")
        .values_list("job", "claimed_at", "finished_at")
    )
    for job, claimed_at, finished_at in latest:
        ended = cast(datetime.datetime, finished_at)  # Filtered on: never None here.
        facts.durations.setdefault(job, []).append(ended - claimed_at)


def _read_missed(facts: Facts) -> None:
    """The fires and windows of the look-back that neither a claim nor a skip has."""
    expected = {job: each for job in facts.known_jobs() if (each := _expected(facts, job))}
    # Jobs of one schedule and start expect the same keys: one condition for them all,
    # which the unique (job, window) index answers, however old the claims. Most
    # jobs of a schedule share the very listing, whose keys are gathered once.
    keys_of: dict[int, tuple[str, ...]] = {}
    groups: dict[tuple[str, ...], list[str]] = {}
    for job, listed in expected.items():
        keys = keys_of.get(id(listed))
        if keys is None:
            keys = keys_of[id(listed)] = tuple(key for _start, key in listed)
        groups.setdefault(keys, []).append(job)
    short = _short_of_claims(groups)
    if not short:
        return
    of_the_short = reduce(
        or_,
        (
            Q(job__in=[job for job in jobs if job in short], window__in=keys)
            for keys, jobs in groups.items()
            if short.intersection(jobs)
        ),
    )
    claimed = JobRun.objects.filter(of_the_short).values_list("job", "window")
    skipped = JobSkip.objects.filter(of_the_short).values_list("job", "window")
    had = set(claimed.union(skipped))
    for job in sorted(short):
        if missed := [key for _start, key in expected[job] if (job, key) not in had]:
            facts.missed[job] = missed


def _short_of_claims(groups: dict[tuple[str, ...], list[str]]) -> set[str]:
    """The jobs that lack a claim of one of the keys their group expects.

    Counted in the database, one count per job: most jobs claimed every
    window, and fetching a day of each one's claims to find so is most of
    what a scrape of a thousand jobs costs. A claim is unique on its job and
    window, so a job with as many claims of its keys as it has keys has all.
    """
    if not groups:
        return set()
    claimed = reduce(or_, (Q(job__in=jobs, window__in=keys) for keys, jobs in groups.items()))
    counts = JobRun.objects.filter(claimed).order_by().values("job").annotate(claims=Count("pk"))
    wanted = {}
    for keys, jobs in groups.items():
        wanted.update(dict.fromkeys(jobs, len(set(keys))))
    whole = {job for job, claims in counts.values_list("job", "claims") if claims >= wanted[job]}
    return set(wanted) - whole


def _expected(facts: Facts, job: str) -> Sequence[tuple[datetime.datetime, str]]:
    """``job``'s fires or windows that ended in the look-back, with when each began."""
    if job == retention.RETENTION_JOB:
        return []  # A period with no pass left nothing to do that the next does not.
    look_back = facts.now - jobclaims_settings.missed_look_back
    if (scheduled := facts.scheduled.get(job)) is not None:
        in_force = facts.in_force_since(scheduled)
        if in_force is None:
            return []  # No scheduler looked at this schedule yet: none of its fires was due.
        return _expected_fires(scheduled, max(in_force, look_back), facts.now)
    since = facts.known_since(job)
    newest = facts.newest.get(job)
    if since is None or newest is None:
        return []
    listing = ended_windows(newest.schedule, look_back, facts.now, facts.zone)
    # The window holding the first claim counts; those before it do not.
    first = bisect.bisect_right(listing.ends, since.timestamp())
    if first == 0 and len(listing.windows) <= MISSED_COUNTED:
        return listing.windows  # Shared by the jobs of the schedule, as _read_missed groups them.
    return listing.windows[first:][-MISSED_COUNTED:]


def _expected_fires(
    job: JobSchedule, start: datetime.datetime, now: datetime.datetime
) -> list[tuple[datetime.datetime, str]]:
    """Fires from ``start`` that are at least ``ON_TIME`` old, newest ``MISSED_COUNTED``."""
    fires = itertools.takewhile(lambda fire: fire >= start, job.cron.fires_before(now - ON_TIME))
    return [
        (fire, job.slots.key_at(fire))
        for fire in reversed(list(itertools.islice(fires, MISSED_COUNTED)))
    ]


class Windows(NamedTuple):
    """The windows ``ended_windows()`` lists: when each began and its key, and
    when each ended, in Unix time, for a job's first claim to cut them by."""

    windows: tuple[tuple[datetime.datetime, str], ...]
    ends: tuple[float, ...]


@functools.lru_cache(maxsize=64)
def ended_windows(
    schedule: str, start: datetime.datetime, now: datetime.datetime, zone: str
) -> Windows:
    """The windows of ``schedule`` that ended after ``start`` and by ``now``,
    oldest first.

    The same for every job of one schedule in one read (and ``zone``, the
    time zone their keys are in): cached, so that a thousand hourly jobs
    cost one listing.
    """
    window = Slots.recorded(schedule).window
    if window is None:
        return Windows((), ())  # Claims that name no window (or none): nothing to expect.
    starts = [
        (window.start_of(key), key) for key in window.keys_between(start - window.longest, now)
    ]
    # The window now running is not missed yet; each ends where the next begins.
    ends = [moment for moment, _key in starts[1:]] + [window.start_of(window.key_at(now))]
    kept = [(began, end) for began, end in zip(starts, ends, strict=False) if end > start]
    return Windows(tuple(began for began, _end in kept), tuple(end.timestamp() for _b, end in kept))
