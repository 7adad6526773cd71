"""Cron schedules on jobs: when a job fires, and which window each fire claims.

A ``JobCommand`` with ``schedule = "5 2 * * *"`` fires at those times in the
project's ``TIME_ZONE``, and each fire time is a window: every instance that
starts for a fire, on time or a few seconds late, computes the same key from
the most recent fire due by the database clock, and the claim lets one of
them run it.

Fire times come from cronsim, which follows Debian cron on daylight-saving
days: a fire whose wall time a spring-forward change skips runs once, at the
change; one whose wall time a fall-back change repeats runs once, at its
first occurrence, while an hourly or more frequent expression fires in both
repeated hours, an hour apart. Keys carry the UTC offset, so each fire is one
instant with one key.

A job may also declare a ``window``; then its keys are that window's, as
before the schedule was added, provided no window holds two fires (that
would run the second fire never: ``problems()`` refuses it).
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from cronsim import CronSim, CronSimError
from django.utils import timezone

from jobclaims import attempts, windows
from jobclaims.attempts import RetryPolicy
from jobclaims.models import JobRun
from jobclaims.windows import UTC

MICROSECOND = datetime.timedelta(microseconds=1)
SECOND = datetime.timedelta(seconds=1)

#: How late a fire may be claimed and still count as on time: a scheduler
#: that wakes late, or a crontab line's ``--once`` that starts slowly.
ON_TIME = datetime.timedelta(minutes=1)

#: A declared window is compared with this many of the schedule's fires, or
#: the fires of this long, whichever ends first: long enough to cross both
#: daylight-saving changes of a year.
_COMPARED_FIRES = 10_000
_COMPARED_SPAN = datetime.timedelta(days=400)

#: Catching up (``misfire = "all"``) looks back this many fires at most.
CATCH_UP_LIMIT = 100


class Misfire:
    """What a scheduler does with fires that no scheduler was up to claim.

    A fire is missed when every scheduler was down at its time (a deploy at
    02:05). When one comes back, the job's ``misfire`` says:
    """

    #: Run nothing missed; wait for the next fire. Only a fire at most
    #: ``ON_TIME`` old is claimed.
    SKIP = "skip"
    #: Run the most recent missed fire once, if it is no older than the job's
    #: ``misfire_deadline`` (no deadline: any age). The default.
    LATEST = "latest"
    #: Run every missed fire since the job's newest claim, oldest first, one
    #: at a time (at most ``CATCH_UP_LIMIT``).
    ALL = "all"

    choices = (SKIP, LATEST, ALL)


@dataclass(frozen=True)
class CronSchedule:
    """A cron expression evaluated in the project's time zone.

    Five fields (minute to day of week), or six with a leading seconds field.
    """

    expression: str

    def __post_init__(self) -> None:
        fields = self.expression.split()
        if len(fields) not in (5, 6):
            raise ValueError(
                f"schedule {self.expression!r} has {len(fields)} fields; write five, "
                "minute hour day month weekday, like '5 2 * * *' (or six, with "
                "seconds first)"
            )
        try:
            CronSim(self.expression, _local(timezone.now()))
        except CronSimError as error:
            raise ValueError(
                f"schedule {self.expression!r} is not a cron expression ({error}); "
                "write it like '5 2 * * *' for 02:05 every day"
            ) from None

    @property
    def has_seconds(self) -> bool:
        return len(self.expression.split()) == 6

    def describe(self) -> str:
        """The schedule in words, like "At 02:05 every day"."""
        return str(CronSim(self.expression, _local(timezone.now())).explain())

    # cronsim counts in whole seconds, and where a start has microseconds
    # its versions differ: 2.7 (the last for Python 3.10) drops them going
    # backwards, 2.8 does not. So each walk starts a whole second beyond
    # ``moment`` and drops the fires on the wrong side of it.

    def fires_after(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times after ``moment``, soonest first, in UTC."""
        start = _local(moment.replace(microsecond=0) - SECOND)
        for fire in CronSim(self.expression, start):
            if fire > moment:
                yield fire.astimezone(UTC)

    def fires_before(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times at or before ``moment``, latest first, in UTC."""
        start = _local(moment.replace(microsecond=0) + SECOND)
        for fire in CronSim(self.expression, start, reverse=True):
            if fire <= moment:
                yield fire.astimezone(UTC)

    def latest_fire(self, moment: datetime.datetime) -> datetime.datetime | None:
        """The most recent fire time at or before ``moment``."""
        return next(self.fires_before(moment), None)

    def fires_between(
        self, start: datetime.datetime, end: datetime.datetime
    ) -> list[datetime.datetime]:
        """Fire times after ``start`` and at or before ``end``, oldest first."""
        return list(itertools.takewhile(lambda fire: fire <= end, self.fires_after(start)))

    def key(self, fire: datetime.datetime) -> str:
        """The key of the window ``fire`` opens: its local time, with its offset."""
        return windows._local(fire).isoformat("T", "seconds" if self.has_seconds else "minutes")

    def fire_for(self, text: str) -> datetime.datetime:
        """The fire an operator's ``--window`` names.

        A date and time names the latest fire at or before it; a date alone,
        the day's first fire.
        """
        moment = windows._moment(text)
        if "T" in text:
            fire = self.latest_fire(moment)
        else:
            fire = next(self.fires_after(moment - MICROSECOND), None)
            if fire is not None and _local(fire).date() != _local(moment).date():
                fire = None
        if fire is None:
            raise ValueError(f"{text!r} names no fire time of {self.expression!r}")
        return fire


class ScheduledCommand(Protocol):
    """A ``JobCommand``, as far as its schedule goes; the commands import this module."""

    job_name: str | None
    window: windows.WindowSpec
    allow_overlap: bool
    schedule: str | None
    misfire: str
    misfire_deadline: datetime.timedelta | None
    retries: int
    retry_backoff: datetime.timedelta
    retry_backoff_max: datetime.timedelta

    @classmethod
    def declares_window(cls) -> bool: ...

    def _lease(self, given: datetime.timedelta | None) -> datetime.timedelta: ...


@dataclass(frozen=True)
class JobSchedule:
    """A scheduled job as the scheduler and the operators' views see it."""

    #: The management command that runs the job.
    command: str
    #: The name its claims are recorded under.
    job: str
    cron: CronSchedule
    #: The job's declared window, whose keys its fires claim; None: the fire's own.
    window: windows.CalendarWindow | windows.FixedWindow | None
    lease: datetime.timedelta
    allow_overlap: bool
    misfire: str
    misfire_deadline: datetime.timedelta | None
    #: What the scheduler does with a fire that failed (``jobclaims.attempts``).
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @classmethod
    def of(cls, command: ScheduledCommand, name: str) -> JobSchedule:
        """The schedule of the ``JobCommand`` ``command``, known as ``name``.

        Raises ``ValueError`` naming the fix when the job's schedule,
        window or misfire policy cannot be used (see ``problems()``).
        """
        assert command.schedule, "only a JobCommand with a schedule has one"
        if found := problems(type(command)):
            raise ValueError(found[0])
        return cls(
            command=name,
            job=command.job_name or name,
            cron=CronSchedule(command.schedule),
            window=windows.resolve(command.window) if command.declares_window() else None,
            lease=command._lease(None),
            allow_overlap=command.allow_overlap,
            misfire=command.misfire,
            misfire_deadline=command.misfire_deadline,
            retry=RetryPolicy(command.retries, command.retry_backoff, command.retry_backoff_max),
        )

    @property
    def recorded_schedule(self) -> str:
        """What claims record in their ``schedule`` column."""
        if self.window is not None:
            return self.window.name
        # The column holds 32 characters; longer expressions are not named.
        return self.cron.expression if len(self.cron.expression) <= 32 else "cron"

    def key(self, fire: datetime.datetime) -> str:
        if self.window is not None:
            return self.window.key_at(fire)
        return self.cron.key(fire)

    def key_for(self, text: str) -> str:
        """The window key an operator's ``--window`` names, or ``ValueError``."""
        return self.key(self.cron.fire_for(text))

    def expected_fires(
        self, start: datetime.datetime, end: datetime.datetime
    ) -> list[tuple[datetime.datetime, str]]:
        """Each fire after ``start`` up to ``end``, with the key it claims."""
        return [(fire, self.key(fire)) for fire in self.cron.fires_between(start, end)]

    def due(self, now: datetime.datetime) -> datetime.datetime | None:
        """The fire to claim at ``now`` by the misfire policy (not for ``all``)."""
        fire = self.cron.latest_fire(now)
        if fire is None:
            return None
        late = now - fire
        if self.misfire == Misfire.SKIP and late > ON_TIME:
            return None
        deadline = self.misfire_deadline
        if self.misfire == Misfire.LATEST and deadline and late > max(deadline, ON_TIME):
            return None
        return fire

    def missed_since(
        self, anchor: datetime.datetime, now: datetime.datetime
    ) -> list[tuple[datetime.datetime, str]]:
        """Fires after ``anchor`` up to ``now``, oldest first, at most ``CATCH_UP_LIMIT``."""
        fires = list(itertools.islice(self.cron.fires_before(now), CATCH_UP_LIMIT))
        return [(fire, self.key(fire)) for fire in reversed(fires) if fire > anchor]


@dataclass(frozen=True)
class JobOverview:
    """What operators see of a scheduled job: where the health checks look too."""

    schedule: JobSchedule
    #: The next fire times, soonest first.
    next_fires: list[datetime.datetime]
    #: The job's newest claim, with ``state`` annotated (``jobclaims.states``).
    last_run: JobRun | None
    #: Keys of recent fires no instance claimed, oldest first.
    missed: list[str]
    #: Keys of recent fires claimed later than ``ON_TIME``: caught up.
    caught_up: list[str]
    #: What is wrong with the job ("overdue: ...", "failed: ..."): see ``health.checked_overview``.
    problems: list[str] = field(default_factory=list)


#: The overview looks back this many fires.
OVERVIEW_FIRES = 50


def overview(job: JobSchedule, now: datetime.datetime, *, upcoming: int = 3) -> JobOverview:
    """``job``'s schedule, next fires, last run and missed fires at ``now``.

    Fires are counted from the job's first claim on, and a fire not yet
    ``ON_TIME`` old is not missed yet.
    """
    runs = JobRun.objects.filter(job=job.job)
    last = runs.with_state().order_by("-claimed_at").first()
    first = runs.order_by("claimed_at").first()
    missed: list[str] = []
    caught_up: list[str] = []
    if first is not None:
        # History starts at the fire the job's first claim was for.
        start = job.cron.latest_fire(first.claimed_at) or first.claimed_at
        recent = [
            (fire, job.key(fire))
            for fire in itertools.islice(job.cron.fires_before(now - ON_TIME), OVERVIEW_FIRES)
            if fire >= start
        ]
        claimed_at = dict(
            runs.filter(window__in=[key for _, key in recent]).values_list("window", "claimed_at")
        )
        for fire, key in reversed(recent):
            if key not in claimed_at:
                missed.append(key)
            elif claimed_at[key] - fire > ON_TIME:
                caught_up.append(key)
    return JobOverview(
        schedule=job,
        next_fires=list(itertools.islice(job.cron.fires_after(now), upcoming)),
        last_run=last,
        missed=missed,
        caught_up=caught_up,
    )


def problems(command_class: type[ScheduledCommand]) -> list[str]:
    """What keeps the job's schedule from being used, as sentences naming the fix."""
    name = command_class.__module__.rpartition(".")[2]
    expression = command_class.schedule
    if not expression:
        return []
    if not isinstance(expression, str):
        return [f"{name}: schedule must be a cron expression string, not {expression!r}"]
    try:
        cron = CronSchedule(expression)
    except ValueError as error:
        return [f"{name}: {error}"]
    found = []
    if command_class.misfire not in Misfire.choices:
        found.append(
            f"{name}: misfire {command_class.misfire!r} is not one of "
            f"{', '.join(map(repr, Misfire.choices))}"
        )
    deadline = command_class.misfire_deadline
    if deadline is not None and not (
        isinstance(deadline, datetime.timedelta) and deadline > datetime.timedelta()
    ):
        found.append(f"{name}: misfire_deadline must be a positive timedelta or None")
    found += attempts.problems(
        name,
        command_class.retries,
        command_class.retry_backoff,
        command_class.retry_backoff_max,
    )
    if command_class.declares_window():
        try:
            window = windows.resolve(command_class.window)
        except ValueError as error:
            return [*found, f"{name}: {error}"]
        if shared := _two_fires_in_one_window(cron, window):
            first, second = shared
            found.append(
                f"{name}: schedule {expression!r} contradicts window "
                f"{command_class.window!r}: the fires at {_show(first)} and {_show(second)} "
                "fall in one window, so the second would never run; remove the window "
                "(each fire time is then its own window) or make it shorter"
            )
    return found


def _two_fires_in_one_window(
    cron: CronSchedule, window: windows.CalendarWindow | windows.FixedWindow
) -> tuple[datetime.datetime, datetime.datetime] | None:
    start = timezone.now()
    previous: tuple[datetime.datetime, str] | None = None
    for fire in itertools.islice(cron.fires_after(start), _COMPARED_FIRES):
        if fire - start > _COMPARED_SPAN:
            break
        key = window.key_at(fire)
        if previous is not None and previous[1] == key:
            return previous[0], fire
        previous = (fire, key)
    return None


def _show(moment: datetime.datetime) -> str:
    return f"{windows._local(moment):%Y-%m-%d %H:%M:%S %Z}"


def _local(moment: datetime.datetime) -> datetime.datetime:
    """``moment`` as cronsim needs it: in the project's zone, by way of UTC."""
    return windows._local(moment)


def describe(view: JobOverview) -> str:
    """A job's overview as a few lines of text, for ``--list`` and ``jobclaims_status``."""
    job = view.schedule
    lines = [
        f"{job.command}: {job.cron.expression} ({job.cron.describe()}, "
        f"{timezone.get_current_timezone_name()}); "
        f"misfire: {job.misfire}"
    ]
    upcoming = ", ".join(
        f"{timezone.localtime(fire):%Y-%m-%d %H:%M:%S %Z}" for fire in view.next_fires
    )
    lines.append(f"  next: {upcoming or 'never'}")
    if view.last_run is None:
        lines.append("  last run: none yet")
    else:
        run = view.last_run
        lines.append(
            f"  last run: {run.window} {getattr(run, 'state', run.status)} (attempt {run.attempt})"
        )
    if view.missed:
        lines.append(f"  missed: {len(view.missed)}, the latest {view.missed[-1]}")
    if view.caught_up:
        lines.append(f"  caught up late: {len(view.caught_up)}, the latest {view.caught_up[-1]}")
    lines.extend(f"  ! {problem}" for problem in view.problems)
    return "\n".join(lines)


def as_document(view: JobOverview) -> dict[str, object]:
    """A job's overview for ``jobclaims_status --json``; times in ISO 8601, UTC."""
    job, run = view.schedule, view.last_run
    return {
        "job": job.job,
        "command": job.command,
        "schedule": job.cron.expression,
        "in_words": job.cron.describe(),
        "time_zone": timezone.get_current_timezone_name(),
        "misfire": job.misfire,
        "next_fires": [fire.isoformat() for fire in view.next_fires],
        "last_run": None
        if run is None
        else {
            "window": run.window,
            "state": getattr(run, "state", run.status),
            "attempt": run.attempt,
            "claimed_at": run.claimed_at.isoformat(),
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        },
        "missed": view.missed,
        "caught_up": view.caught_up,
        "problems": view.problems,
        "healthy": not view.problems,
    }
