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

``time_zone = "America/New_York"`` evaluates the expression in that zone
instead, by the same daylight-saving rules, and keys each fire by its local
time there, with its offset: still one key per instant. A job with several
``schedules`` (``Schedule``) is one scheduled job per schedule, each with
its own claim name (``jobclaims.schedule_names``) and arguments. ``jitter``
delays each fire's start, after its claim, by a random moment within it
(``jobclaims.scheduler``); the fire and its key stay the fire time.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import re
import zoneinfo
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cronsim import CronSim, CronSimError
from django.utils import timezone

from jobclaims import attempts, leases, schedule_names, timeouts, windows
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

#: Catching up (``misfire = "all"``) reads this many fires per look at most,
#: the oldest first; the next look goes on from the newest it claimed.
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
    #: at a time (``CATCH_UP_LIMIT`` fires read per look), none from before
    #: the schedule came into force.
    ALL = "all"

    choices = (SKIP, LATEST, ALL)


#: Vixie cron's nicknames, as the five fields each stands for.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

#: A one-value range with a step, like ``30-30/15``: Vixie cron reads it as
#: the one value, and cronsim as "30 and every 15th after" (see ``_as_cronsim``).
_ONE_VALUE_RANGE = re.compile(r"^(\w+)-(\w+)/\d+$")


@dataclass(frozen=True)
class Schedule:
    """One of a job's ``schedules``: when it fires, and what the job is started with.

    ``args`` are passed to the job's command at each fire, before the
    scheduler's own options (``manage.py sync_regions --region eu``).
    ``time_zone`` is the zone the expression is read in; None: the job's
    ``time_zone``, else ``TIME_ZONE``. ``name`` names its claims
    (``jobclaims.schedule_names``); None: the arguments, else the expression.
    """

    expression: str
    args: Sequence[str] = ()
    time_zone: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.args, (str, bytes)):
            object.__setattr__(self, "args", tuple(self.args))

    @property
    def given_name(self) -> str:
        """The name its claims are recorded under, in brackets after the job's."""
        if self.name is not None:
            return self.name
        return " ".join(map(str, self.args)) or str(self.expression).strip()


@dataclass(frozen=True)
class CronSchedule:
    """A cron expression evaluated in the project's time zone.

    Five fields (minute to day of week), six with a leading seconds field,
    or one of Vixie cron's nicknames (``@daily``). Fields mean what they mean
    to Vixie cron, which cronsim follows but for one-value ranges with a step.
    ``time_zone`` names the zone it is evaluated in instead.
    """

    expression: str
    #: An IANA zone name ("America/New_York"); None: the project's ``TIME_ZONE``.
    time_zone: str | None = None

    def __post_init__(self) -> None:
        if self.time_zone is not None:
            _zone(self.time_zone)
        _refuse_what_cron_would_not_run(self.expression)
        try:
            CronSim(self._cronsim, self.local(timezone.now()))
        except CronSimError as error:
            raise ValueError(
                f"schedule {self.expression!r} is not a cron expression ({error}); "
                "write it like '5 2 * * *' for 02:05 every day, with numbers, names (MON, "
                "JAN), ranges (1-5), steps (*/15, 0-30/10) and lists (1,15) in each field"
            ) from None

    @property
    def _cronsim(self) -> str:
        """The expression as cronsim reads it the way Vixie cron does."""
        fields = ALIASES.get(self.expression.strip().lower(), self.expression).split()
        names = [()] * (len(fields) - 2) + [_MONTHS, _WEEKDAYS]
        return " ".join(map(_as_cronsim, fields, names))

    def describe(self) -> str:
        """The schedule in words, like "At 02:05 every day"."""
        return str(CronSim(self._cronsim, self.local(timezone.now())).explain())

    @property
    def zone_name(self) -> str:
        """The name of the zone its fires are wall times in."""
        return self.time_zone or timezone.get_current_timezone_name()

    def local(self, moment: datetime.datetime) -> datetime.datetime:
        """``moment`` as cronsim needs it: in the schedule's zone, by way of UTC."""
        if self.time_zone is None:
            return windows._local(moment)
        return moment.astimezone(UTC).astimezone(_zone(self.time_zone))

    # cronsim counts in whole seconds, and where a start has microseconds
    # its versions differ: 2.7 (the last for Python 3.10) drops them going
    # backwards, 2.8 does not. So each walk starts a whole second beyond
    # ``moment`` and drops the fires on the wrong side of it. ``moment`` is
    # compared in UTC: two datetimes in one zone compare by wall time, and a
    # local time a spring-forward change skips (02:30, read as 03:30) would
    # come before the 03:00 fire at the change.

    def fires_after(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times after ``moment``, soonest first, in UTC."""
        moment = moment.astimezone(UTC)
        start = self.local(moment.replace(microsecond=0) - SECOND)
        for fire in CronSim(self._cronsim, start):
            if fire > moment:
                yield fire.astimezone(UTC)

    def fires_before(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """Fire times at or before ``moment``, latest first, in UTC."""
        moment = moment.astimezone(UTC)
        start = self.local(moment.replace(microsecond=0) + SECOND)
        for fire in CronSim(self._cronsim, start, reverse=True):
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
        return windows.canonical(self.local(fire))

    @property
    def at_set_local_times(self) -> bool:
        """Whether cronsim moves a fire that a spring-forward change skips to
        the change, as Debian cron does: five fields, minute and hour without ``*``."""
        fields = self._cronsim.split()
        return len(fields) == 5 and not fields[0].startswith("*") and not fields[1].startswith("*")

    def shortest_gap(self) -> tuple[datetime.datetime, datetime.datetime]:
        """Two consecutive fires, as wall times, as close as any two ever are.

        Worked out from the fields, for all time: the closest two times of
        one day, and the closest two days of the Gregorian calendar's
        400-year cycle (146,097 days, a whole number of weeks, after which
        dates and weekdays repeat) with the last time of the first and the
        first time of the second.
        """
        walk = CronSim(self._cronsim, datetime.datetime(2000, 1, 1))
        times = sorted(
            datetime.time(hour, minute, second)
            for hour in walk.hours
            for minute in walk.minutes
            for second in walk.seconds
        )
        closest = min(itertools.pairwise(times), key=_seconds_apart, default=None)
        days = _closest_days(walk)
        across = (
            datetime.datetime.combine(days[0], times[-1]),
            datetime.datetime.combine(days[1], times[0]),
        )
        if closest is None or across[1] - across[0] <= _seconds_apart(closest) * SECOND:
            return across
        return (
            datetime.datetime.combine(days[0], closest[0]),
            datetime.datetime.combine(days[0], closest[1]),
        )

    def fire_for(self, text: str) -> datetime.datetime:
        """The fire an operator's ``--window`` names.

        A date and time names the latest fire at or before it; a date alone,
        the day's first fire.
        """
        zone = None if self.time_zone is None else _zone(self.time_zone)
        moment = windows._moment(text, zone)
        if "T" in text:
            fire = self.latest_fire(moment)
        else:
            fire = next(self.fires_after(moment - MICROSECOND), None)
            if fire is not None and self.local(fire).date() != self.local(moment).date():
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
    schedules: Sequence[Schedule]
    time_zone: str | None
    jitter: datetime.timedelta | None
    misfire: str
    misfire_deadline: datetime.timedelta | None
    retries: int
    retry_backoff: datetime.timedelta
    retry_backoff_max: datetime.timedelta
    lease: datetime.timedelta | None
    timeout: datetime.timedelta | None
    timeout_grace: datetime.timedelta

    @classmethod
    def declares_window(cls) -> bool: ...

    def _lease(self, given: datetime.timedelta | None) -> datetime.timedelta: ...


def entries(command_class: type[ScheduledCommand]) -> list[Schedule]:
    """The job's schedules, each with the zone it is read in: its
    ``schedules``, or its one ``schedule`` under the job's own name ("").

    What is no ``Schedule`` in the list is left out: ``problems()`` names it."""
    zone = command_class.time_zone
    if command_class.schedules:
        return [
            dataclasses.replace(each, time_zone=each.time_zone or zone)
            for each in command_class.schedules
            if isinstance(each, Schedule)
        ]
    if command_class.schedule is None:
        return []
    return [Schedule(command_class.schedule, time_zone=zone, name="")]


@dataclass(frozen=True)
class JobSchedule:
    """One schedule of a scheduled job, as the scheduler and the operators' views see it.

    A job with several ``schedules`` has one per schedule, each with its own
    claim name ``job`` (``jobclaims.schedule_names``).
    """

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
    #: How long the job's process may run before the scheduler stops it
    #: (``jobclaims.timeouts``); None: no limit.
    timeout: datetime.timedelta | None = None
    #: Between the SIGTERM of a stop (timeout, cancel) and its SIGKILL.
    timeout_grace: datetime.timedelta = timeouts.DEFAULT_GRACE
    #: The schedule's name among the job's ``schedules``; "": the job's one ``schedule``.
    name: str = ""
    #: What the job's command is started with at each fire.
    args: tuple[str, ...] = ()
    #: Each fire starts this long after its claim at most, at random; None: at once.
    jitter: datetime.timedelta | None = None

    @classmethod
    def each_of(cls, command: ScheduledCommand, name: str) -> list[JobSchedule]:
        """Each schedule of the ``JobCommand`` ``command``, known as ``name``.

        Raises ``ValueError`` naming the fix when the job's schedules,
        window or misfire policy cannot be used (see ``problems()``).
        """
        if found := problems(type(command)):
            raise ValueError(found[0])
        job = command.job_name or name
        return [
            cls(
                command=name,
                job=schedule_names.claim_name(job, entry.given_name) if entry.given_name else job,
                cron=CronSchedule(entry.expression, entry.time_zone),
                window=windows.resolve(command.window) if command.declares_window() else None,
                lease=command._lease(None),
                allow_overlap=command.allow_overlap,
                misfire=command.misfire,
                misfire_deadline=command.misfire_deadline,
                retry=RetryPolicy(
                    command.retries, command.retry_backoff, command.retry_backoff_max
                ),
                timeout=command.timeout,
                timeout_grace=command.timeout_grace,
                name=entry.given_name,
                args=tuple(entry.args),
                jitter=command.jitter,
            )
            for entry in entries(type(command))
        ]

    @classmethod
    def of(cls, command: ScheduledCommand, name: str) -> JobSchedule:
        """The first schedule of the ``JobCommand`` ``command``, known as ``name``:
        its only one, for a job with a ``schedule``."""
        assert command.schedule is not None or command.schedules, "a job without a schedule"
        return cls.each_of(command, name)[0]

    @property
    def label(self) -> str:
        """How the views name it: the command, and the schedule's name if it has one."""
        return f"{self.command}[{self.name}]" if self.name else self.command

    @property
    def time_zone(self) -> str:
        """The name of the zone its fires are wall times in."""
        return self.cron.zone_name

    def next_fires(self, now: datetime.datetime, count: int = 5) -> list[datetime.datetime]:
        """Its next ``count`` fire times after ``now``, soonest first, in UTC."""
        return list(itertools.islice(self.cron.fires_after(now), count))

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
        if self.misfire == Misfire.LATEST and deadline and late > deadline:
            return None
        return fire

    def missed_since(
        self, anchor: datetime.datetime, now: datetime.datetime
    ) -> list[tuple[datetime.datetime, str]]:
        """The oldest ``CATCH_UP_LIMIT`` fires after ``anchor`` up to ``now``, oldest first."""
        due = itertools.takewhile(lambda fire: fire <= now, self.cron.fires_after(anchor))
        return [(fire, self.key(fire)) for fire in itertools.islice(due, CATCH_UP_LIMIT)]


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


def overview(
    job: JobSchedule, now: datetime.datetime, *, upcoming: int = 3, fires: int = OVERVIEW_FIRES
) -> JobOverview:
    """``job``'s schedule, next fires, last run and missed fires at ``now``,
    among its latest ``fires``.

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
            for fire in itertools.islice(job.cron.fires_before(now - ON_TIME), fires)
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
    """What keeps the job's schedules from being used, as sentences naming the fix."""
    name = command_class.__module__.rpartition(".")[2]
    if command_class.schedule is None and not command_class.schedules:
        return []
    if shape := _shape_problems(command_class):
        return [f"{name}: {problem}" for problem in shape]
    crons = []
    for entry in entries(command_class):
        if not isinstance(entry.expression, str):
            return [f"{name}: schedule must be a cron expression string, not {entry.expression!r}"]
        try:
            crons.append(CronSchedule(entry.expression, entry.time_zone))
        except ValueError as error:
            return [f"{name}: {error}"]
    found = []
    if command_class.misfire not in Misfire.choices:
        found.append(
            f"{name}: misfire {command_class.misfire!r} is not one of "
            f"{', '.join(map(repr, Misfire.choices))}"
        )
    found.extend(f"{name}: {problem}" for problem in _deadline_problems(command_class))
    lease = command_class.lease
    if lease is not None and (problem := leases.problem(lease)):
        found.append(f"{name}: lease {problem}")
    found += attempts.problems(
        name,
        command_class.retries,
        command_class.retry_backoff,
        command_class.retry_backoff_max,
    )
    found += timeouts.problems(name, command_class.timeout, command_class.timeout_grace)
    found.extend(f"{name}: {problem}" for problem in _jitter_problems(command_class.jitter, crons))
    if command_class.declares_window():
        try:
            window = windows.resolve(command_class.window)
        except ValueError as error:
            return [*found, f"{name}: {error}"]
        for cron in crons:
            found.extend(_window_problems(name, cron, window))
    return found


def _window_problems(
    name: str, cron: CronSchedule, window: windows.CalendarWindow | windows.FixedWindow
) -> list[str]:
    """Why the job's declared window cannot key the fires of ``cron``, if it cannot."""
    if isinstance(window, windows.FixedWindow):
        return _gap_shorter_than(name, cron, window)
    if cron.time_zone not in (None, timezone.get_current_timezone_name()):
        return [
            f"{name}: time_zone {cron.time_zone!r} and window {window.name!r} disagree: a "
            f"calendar window follows TIME_ZONE ({timezone.get_current_timezone_name()}); "
            "remove the window (each fire time is then its own window, in the schedule's "
            "zone) or make it a datetime.timedelta"
        ]
    if shared := _two_fires_in_one_window(cron, window):
        first, second = shared
        return [
            f"{name}: schedule {cron.expression!r} contradicts window "
            f"{window.name!r}: the fires at {_show(cron, first)} and {_show(cron, second)} "
            "fall in one window, so the second would never run; remove the window "
            "(each fire time is then its own window) or make it shorter"
        ]
    return []


#: The longest claim name the ``job`` column holds.
_LONGEST_JOB_NAME = 200


def _shape_problems(command_class: type[ScheduledCommand]) -> list[str]:
    """What is wrong with the shape of the job's ``schedules``: each a
    ``Schedule`` with arguments that are strings, and a name of its own."""
    listed = command_class.schedules
    if not listed:
        return []
    if command_class.schedule is not None:
        return [
            "set schedule or schedules, not both; put the one schedule in the list "
            "(Schedule(...)) or remove the list"
        ]
    if isinstance(listed, str) or not all(isinstance(each, Schedule) for each in listed):
        return [
            f"schedules must be a list of jobclaims.commands.Schedule, not {listed!r}; write "
            "schedules = [Schedule('0 * * * *', args=['--region', 'eu']), ...]"
        ]
    found = []
    for each in listed:
        if isinstance(each.args, str) or not all(isinstance(arg, str) for arg in each.args):
            found.append(
                f"the args of schedule {each.expression!r} must be a list of strings, "
                f"like ['--region', 'eu'], not {each.args!r}"
            )
        elif not each.given_name.strip():
            found.append(
                f"schedule {each.expression!r} has an empty name; give it a name, or "
                "leave name out to name it by its arguments"
            )
    names = [each.given_name for each in listed]
    for twice in sorted({given for given in names if names.count(given) > 1}):
        found.append(
            f"two of its schedules are named {twice!r}, so they would share their claims; "
            "give each its own name=, or its own args"
        )
    job = command_class.job_name or command_class.__module__.rpartition(".")[2]
    for given in dict.fromkeys(names):
        claimed = schedule_names.claim_name(job, given)
        if len(claimed) > _LONGEST_JOB_NAME:
            found.append(
                f"the claim name {claimed[:40]!r}… of a schedule is longer than the "
                f"{_LONGEST_JOB_NAME} characters a job name holds; give it a shorter name="
            )
    return found


def _jitter_problems(jitter: datetime.timedelta | None, crons: list[CronSchedule]) -> list[str]:
    """What is wrong with the job's ``jitter``: it must be positive, and
    shorter than any gap between two fires, or a fire could start after
    the next one."""
    if jitter is None:
        return []
    if not isinstance(jitter, datetime.timedelta) or jitter <= datetime.timedelta():
        return [f"jitter must be a positive timedelta or None, not {jitter!r}"]
    for cron in crons:
        first, second = cron.shortest_gap()
        if jitter >= second - first:
            return [
                f"jitter {jitter} is not shorter than the {second - first} between two "
                f"fires of {cron.expression!r}, so a fire could start after the next one; "
                "make it shorter"
            ]
    return []


def _deadline_problems(command_class: type[ScheduledCommand]) -> list[str]:
    """What is wrong with the job's ``misfire_deadline``, as sentences naming the fix.

    Under ``ON_TIME`` it would be a deadline no fire is held to: a fire
    that late is on time. With ``misfire = "skip"`` there is no missed fire
    for it to bound.
    """
    deadline = command_class.misfire_deadline
    if deadline is None:
        return []
    if not isinstance(deadline, datetime.timedelta) or deadline <= datetime.timedelta():
        return ["misfire_deadline must be a positive timedelta or None"]
    if deadline < ON_TIME:
        return [
            f"misfire_deadline {deadline} is shorter than the {ON_TIME.seconds} seconds a "
            "fire may be late and still be on time; make it at least "
            f"timedelta(seconds={ON_TIME.seconds}), or set misfire = 'skip' to run "
            "only fires on time"
        ]
    if command_class.misfire == Misfire.SKIP:
        return [
            "misfire_deadline bounds the missed fire misfire = 'latest' runs, and "
            "misfire = 'skip' runs none; remove the deadline, or set misfire = 'latest'"
        ]
    return []


def _two_fires_in_one_window(
    cron: CronSchedule, window: windows.CalendarWindow
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


def _refuse_what_cron_would_not_run(expression: str) -> None:
    """Raise ``ValueError`` naming the fix for an expression of no fire times."""
    if expression.strip().lower() == "@reboot":
        raise ValueError(
            "schedule '@reboot' names no time: a scheduler starts jobs at fire times, "
            "and each host's scheduler restarts when it likes; start the command from "
            "the host's boot (a systemd unit) instead, or give a time like '@daily'"
        )
    fields = expression.lower().split()
    if not fields:
        raise ValueError(
            f"schedule {expression!r} is empty; write a cron expression like '5 2 * * *', "
            "or leave schedule None for a job that your own cron starts"
        )
    if len(fields) == 1 and fields[0].startswith("@") and fields[0] not in ALIASES:
        raise ValueError(
            f"schedule {expression!r} is not a cron nickname; use one of {', '.join(ALIASES)}"
        )
    if len(fields) not in (1, 5, 6) or (len(fields) == 1 and fields[0] not in ALIASES):
        raise ValueError(
            f"schedule {expression!r} has {len(fields)} fields; write five, "
            "minute hour day month weekday, like '5 2 * * *' (or six, with "
            "seconds first, or a nickname like '@daily')"
        )


def _as_cronsim(field: str, names: tuple[str, ...] = ()) -> str:
    """``field`` with each one-value range with a step (``30-30/15``) as its value."""
    terms = []
    for term in field.split(","):
        match = _ONE_VALUE_RANGE.match(term)
        if match and _value(match[1], names) == _value(match[2], names):
            term = match[1]
        terms.append(term)
    return ",".join(terms)


def _value(text: str, names: tuple[str, ...]) -> str:
    """A field's number or name, as the number it stands for (JAN: 1, SUN: 0)."""
    if text.upper() in names:
        return str(names.index(text.upper()))
    return str(int(text)) if text.isdigit() else text.upper()


#: Names in the month and day-of-week fields, at the index of their number.
_MONTHS = ("", "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


def _gap_shorter_than(name: str, cron: CronSchedule, window: windows.FixedWindow) -> list[str]:
    """A fixed window must be no longer than the shortest gap between two
    fires: then no bucket ever holds two, in any year. A problem naming the
    fix if not.

    Fires at set local times (minute and hour fields without ``*``) can come
    closer than their wall times by the largest change of UTC offset in
    ``TIME_ZONE``: a spring-forward change moves a fire it skips to the
    change. Other expressions skip such fires, and their gaps stay.
    """
    first, second = cron.shortest_gap()
    shift = _zone_shift(cron) if cron.at_set_local_times else datetime.timedelta()
    longest = second - first - shift
    if window.size <= longest:
        return []
    zone = cron.zone_name
    less = f", less the {shift} a change of UTC offset in {zone} can take," if shift else ""
    return [
        f"{name}: schedule {cron.expression!r} contradicts window {window.size!r}: fires "
        f"can come {second - first} apart (like {first:%d %B %H:%M:%S} and "
        f"{second:%d %B %H:%M:%S}){less} and a longer window can hold two, so the second "
        "would never run; remove the window (each fire time is then its own window) or "
        f"make it at most {longest}"
    ]


def _seconds_apart(times: tuple[datetime.time, datetime.time]) -> int:
    first, second = (time.hour * 3600 + time.minute * 60 + time.second for time in times)
    return second - first


#: After this many days dates and weekdays repeat: 400 Gregorian years.
_CALENDAR_CYCLE = 146_097


def _closest_days(walk: CronSim) -> tuple[datetime.date, datetime.date]:
    """The two consecutive fire days closest together in the calendar's cycle."""
    previous: datetime.date | None = None
    closest: tuple[datetime.date, datetime.date] | None = None
    day = datetime.date(2001, 1, 1)
    # One more cycle's worth of the first fire day closes the loop.
    for _ in range(_CALENDAR_CYCLE + 366 * 4):
        if day.month in walk.months and walk.match_day(day):
            if previous is not None and (
                closest is None or day - previous < closest[1] - closest[0]
            ):
                closest = (previous, day)
                if day - previous == datetime.timedelta(days=1):
                    break
            previous = day
        day += datetime.timedelta(days=1)
    assert closest is not None, "cronsim refuses an expression that never fires"
    return closest


def _zone_shift(cron: CronSchedule) -> datetime.timedelta:
    """How much nearer two fires can come than their wall times say: the
    largest change of UTC offset the schedule's zone makes (an hour for most
    zones with daylight saving, none for UTC)."""
    zone = timezone.get_current_timezone() if cron.time_zone is None else _zone(cron.time_zone)
    start = timezone.now()
    offsets = {
        (start + offset * datetime.timedelta(days=7)).astimezone(zone).utcoffset()
        for offset in range(53 * 2)
    }
    known = [offset for offset in offsets if offset is not None]
    return max(known) - min(known)


def _show(cron: CronSchedule, moment: datetime.datetime) -> str:
    return f"{cron.local(moment):%Y-%m-%d %H:%M:%S %Z}"


def _zone(name: str) -> zoneinfo.ZoneInfo:
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


def describe(view: JobOverview) -> str:
    """A job's overview as a few lines of text, for ``--list`` and ``jobclaims_status``."""
    job = view.schedule
    lines = [
        f"{job.label}: {job.cron.expression} ({job.cron.describe()}, {job.time_zone}); "
        f"misfire: {job.misfire}" + (f"; jitter: up to {job.jitter}" if job.jitter else "")
    ]
    if job.args:
        lines.append(f"  args: {' '.join(job.args)}")
    upcoming = ", ".join(f"{job.cron.local(fire):%Y-%m-%d %H:%M:%S %Z}" for fire in view.next_fires)
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
        "schedule_name": job.name or None,
        "args": list(job.args),
        "in_words": job.cron.describe(),
        "time_zone": job.time_zone,
        "misfire": job.misfire,
        "jitter_seconds": job.jitter.total_seconds() if job.jitter else None,
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
