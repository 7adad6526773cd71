"""A job's schedules: what a ``JobCommand`` declares, and whether it can work.

A ``JobCommand`` with ``schedule = "5 2 * * *"`` fires at those times
(``jobclaims.time.cron``), and each fire time is a window: every instance that
starts for a fire, on time or a few seconds late, computes the same key from
the most recent fire due by the database clock, and the claim lets one of
them run it.

A job may also declare a ``window``; then its keys are that window's, as
before the schedule was added, provided no window holds two fires (that
would run the second fire never: ``problems()`` refuses it).

``time_zone = "America/New_York"`` evaluates the expression in that zone
instead, by the same daylight-saving rules, and keys each fire by its local
time there, with its offset: still one key per instant. A job with several
``schedules`` (``Schedule``) is one scheduled job per schedule, each with
its own claim name (``jobclaims.claims.naming``) and arguments. ``jitter``
delays each fire's start, after its claim, by a random moment within it
(``jobclaims.scheduling.scheduler``); the fire and its key stay the fire time.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.utils import timezone

from jobclaims.claims import naming
from jobclaims.claims.rule import Refusal
from jobclaims.models import JobRun
from jobclaims.running import attempts, timeouts
from jobclaims.running.attempts import RetryPolicy
from jobclaims.time import bounds, durations, expressions, leases, wall_times, windows
from jobclaims.time.fire_times import FireTimes
from jobclaims.time.slots import MICROSECOND, Slots
from jobclaims.time.wall_times import named_zone

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
    #: Run every missed fire since the newest fire claimed, oldest first, one
    #: at a time (``CATCH_UP_LIMIT`` fires read per look), none from before
    #: the schedule came into force.
    ALL = "all"

    choices = (SKIP, LATEST, ALL)


class Overlap:
    """What a scheduler does with a fire whose claim found the job's run of
    an earlier fire still going (a job without ``allow_overlap``)."""

    #: Run nothing for it: the fire is skipped. The default.
    SKIP = "skip"
    #: Run it beside the other run (``allow_overlap = True``).
    ALLOW = "allow"
    #: Run it once the other run has ended. At most one fire waits: a newer
    #: one takes its place, and the one it replaced is skipped.
    BUFFER = "buffer"
    #: Cancel the other run (as ``jobclaims_cancel`` does), and run this
    #: fire once the cancelled run has stopped.
    REPLACE = "replace"

    choices = (SKIP, ALLOW, BUFFER, REPLACE)
    #: The policies under which an overlapped fire waits for the run before it.
    holding_back = (BUFFER, REPLACE)

    @classmethod
    def of(cls, overlap: str | None, allow_overlap: bool) -> str:
        """The policy a job's ``overlap`` and ``allow_overlap`` say."""
        return overlap or (cls.ALLOW if allow_overlap else cls.SKIP)


@dataclass(frozen=True)
class Schedule:
    """One of a job's ``schedules``: when it fires, and what the job is started with.

    ``args`` are passed to the job's command at each fire, before the
    scheduler's own options (``manage.py sync_regions --region eu``); for a
    task (``jobclaims.scheduled()``), ``args`` and ``kwargs`` are the task's
    arguments, any values its queue can carry (JSON for most).
    ``time_zone`` is the zone the expression is read in; None: the job's
    ``time_zone``, else ``TIME_ZONE``. ``name`` names its claims
    (``jobclaims.claims.naming``); None: the arguments, else the expression.

    ``start``, ``end``, ``skip_dates`` and ``max_runs`` bound its fires
    (``jobclaims.time.bounds.bounded()``): none before ``start`` or after
    ``end`` (dates or date-times, in its zone; a date as ``end`` keeps its
    day), none on a date of ``skip_dates``, and only the first ``max_runs``
    from ``start``. Bounds take fires away and move none.
    """

    expression: str
    args: Sequence[Any] = ()
    time_zone: str | None = None
    name: str | None = None
    #: A task's keyword arguments; a command takes its options in ``args``.
    kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    start: datetime.date | str | None = None
    end: datetime.date | str | None = None
    skip_dates: Sequence[datetime.date | str] = ()
    max_runs: int | None = None
    #: Its own ``Overlap`` policy; None: the job's.
    overlap: str | None = None

    def __post_init__(self) -> None:
        for name in ("args", "skip_dates"):
            value = getattr(self, name)
            if not isinstance(value, (str, bytes)):
                object.__setattr__(self, name, tuple(value))

    def fire_times(self) -> FireTimes:
        """When it fires: its expression in its zone, within its bounds;
        ``ValueError`` naming the fix."""
        fires = expressions.read(self.expression, self.time_zone)
        return bounds.bounded(fires, self.start, self.end, self.skip_dates, self.max_runs)

    @property
    def given_name(self) -> str:
        """The name its claims are recorded under, in brackets after the job's."""
        if self.name is not None:
            return self.name
        named = [f"{key}={value}" for key, value in self.kwargs.items()]
        return " ".join([*map(str, self.args), *named]) or str(self.expression).strip()


class ScheduledCommand(Protocol):
    """A ``JobCommand``, as far as its schedule goes; the commands import this module."""

    job_name: str | None
    window: windows.WindowSpec
    allow_overlap: bool
    overlap: str | None
    schedule: str | None
    schedules: Sequence[Schedule]
    time_zone: str | None
    jitter: datetime.timedelta | None
    max_run_time: datetime.timedelta | None
    misfire: str
    misfire_deadline: datetime.timedelta | None
    retries: int
    retry_backoff: datetime.timedelta
    retry_backoff_max: datetime.timedelta
    lease: datetime.timedelta | None
    timeout: datetime.timedelta | None
    timeout_grace: datetime.timedelta
    fresh_interpreter: bool

    @classmethod
    def declares_window(cls) -> bool: ...

    def lease_for(self, given: datetime.timedelta | None) -> datetime.timedelta: ...


class FireTarget(Protocol):
    """Where a task schedule's won fires go (``jobclaims.jobs.task_schedules.TaskTarget``)."""

    @property
    def args(self) -> tuple[Any, ...]:
        """The task's positional arguments, as its schedule gives them."""

    @property
    def kwargs(self) -> Mapping[str, Any]:
        """The task's keyword arguments, as its schedule gives them."""

    def enqueue(self, job: JobSchedule, run: JobRun) -> None: ...

    def fire(
        self,
        job: JobSchedule,
        claim: Callable[[datetime.timedelta], JobRun | Refusal],
        *,
        start_lease: datetime.timedelta,
        jittered: bool,
    ) -> JobRun | Refusal: ...

    def delay(self, job: JobSchedule, jittered: bool) -> float: ...

    def claim_lease(self, start_lease: datetime.timedelta, delay: float) -> datetime.timedelta: ...

    def in_claims_database(self) -> bool: ...

    def enqueue_or_settle(self, job: JobSchedule, run: JobRun, delay: float) -> bool: ...


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
    claim name ``job`` (``jobclaims.claims.naming``).
    """

    #: The management command that runs the job.
    command: str
    #: The name its claims are recorded under.
    job: str
    cron: FireTimes
    #: The job's declared window, whose keys its fires claim; None: the fire's own.
    window: windows.CalendarWindow | windows.FixedWindow | None
    lease: datetime.timedelta
    allow_overlap: bool
    misfire: str
    misfire_deadline: datetime.timedelta | None
    #: What the scheduler does with a fire that found the job's run of an
    #: earlier fire still going (``Overlap``).
    overlap: str = Overlap.SKIP
    #: What the scheduler does with a fire that failed (``jobclaims.running.attempts``).
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: How long the job's process may run before the scheduler stops it
    #: (``jobclaims.running.timeouts``); None: no limit.
    timeout: datetime.timedelta | None = None
    #: Between the SIGTERM of a stop (timeout, cancel) and its SIGKILL.
    timeout_grace: datetime.timedelta = timeouts.DEFAULT_GRACE
    #: The schedule's name among the job's ``schedules``; "": the job's one ``schedule``.
    name: str = ""
    #: What the job's command is started with at each fire.
    args: tuple[str, ...] = ()
    #: Each fire starts this long after its claim at most, at random; None: at once.
    jitter: datetime.timedelta | None = None
    #: Its lease is not renewed past this long after its claim; None: no limit.
    max_run_time: datetime.timedelta | None = None
    #: Whether each fire starts a new interpreter, rather than a fork of the
    #: scheduler's fork server (``jobclaims.scheduling.launch``).
    fresh_interpreter: bool = False
    #: For a task schedule, the task its fires enqueue
    #: (``jobclaims.jobs.task_schedules.TaskTarget``); None: a command's process.
    task: FireTarget | None = field(default=None, compare=False)

    @classmethod
    def each_of(cls, command: ScheduledCommand, name: str) -> list[JobSchedule]:
        """Each schedule of the ``JobCommand`` ``command``, known as ``name``.

        Raises ``ValueError`` naming the fix when the job's schedules,
        window or misfire policy cannot be used (see ``problems()``).
        """
        if found := problems(type(command)):
            raise ValueError(found[0])
        return [cls.of_entry(command, name, entry) for entry in entries(type(command))]

    @classmethod
    def of_entry(cls, command: ScheduledCommand, name: str, entry: Schedule) -> JobSchedule:
        """The schedule ``entry`` of the ``JobCommand`` ``command``, known as
        ``name``: one of its ``schedules``, or one stored in the database
        (``jobclaims.jobs.stored_schedules``). ``ValueError`` naming the fix
        if its expression or bounds cannot be read."""
        job = command.job_name or name
        overlap = Overlap.of(entry.overlap or command.overlap, command.allow_overlap)
        return cls(
            command=name,
            job=naming.claim_name(job, entry.given_name) if entry.given_name else job,
            cron=entry.fire_times(),
            window=windows.resolve(command.window) if command.declares_window() else None,
            lease=command.lease_for(None),
            allow_overlap=overlap == Overlap.ALLOW,
            overlap=overlap,
            misfire=command.misfire,
            misfire_deadline=command.misfire_deadline,
            retry=RetryPolicy(command.retries, command.retry_backoff, command.retry_backoff_max),
            timeout=command.timeout,
            timeout_grace=command.timeout_grace,
            name=entry.given_name,
            args=tuple(entry.args),
            jitter=command.jitter,
            max_run_time=command.max_run_time,
            fresh_interpreter=command.fresh_interpreter,
        )

    @classmethod
    def of(cls, command: ScheduledCommand, name: str) -> JobSchedule:
        """The first schedule of the ``JobCommand`` ``command``, known as ``name``:
        its only one, for a job with a ``schedule``."""
        assert command.schedule is not None or command.schedules, "a job without a schedule"
        return cls.each_of(command, name)[0]

    @property
    def label(self) -> str:
        """How the views name it: by its claim name, which the operator
        commands take, and by its command too where that is another name."""
        job = naming.parent(self.job) or self.job
        return self.job if job == self.command else f"{self.job} (command {self.command})"

    @property
    def time_zone(self) -> str:
        """The name of the zone its fires are wall times in."""
        return self.cron.zone_name

    def next_fires(self, now: datetime.datetime, count: int = 5) -> list[datetime.datetime]:
        """Its next ``count`` fire times after ``now``, soonest first, in UTC."""
        return list(itertools.islice(self.cron.fires_after(now), count))

    @property
    def series(self) -> str:
        """What its fires are whatever it is named (``naming.series()``): each
        claim of a fire records it, and a fire claimed under one name of the
        schedule is refused under another."""
        kwargs = self.task.kwargs if self.task is not None else None
        return naming.series(self.command, self.args, self.cron.expression, self.time_zone, kwargs)

    def under(self, name: str) -> JobSchedule | None:
        """This schedule as claimed under ``name``, an earlier name of it (a
        deploy renamed it), so that a fire claimed under that name can be run
        again under it, by a process that adopts that name's claim; None for a
        name of another job (its ``job_name`` changed), whose claims the
        job's process would not adopt."""
        parent = naming.parent(self.job) or self.job
        if name == parent:
            return dataclasses.replace(self, job=name, name="")
        if naming.parent(name) == parent:
            return dataclasses.replace(self, job=name, name=name[len(parent) + 1 : -1])
        return None

    @property
    def slots(self) -> Slots:
        """How its time is cut: each fire a slot, keyed by the declared window if it has one."""
        return Slots(self.window, self.cron)

    def due(self, now: datetime.datetime) -> datetime.datetime | None:
        """The fire to claim at ``now`` by the misfire policy (not for ``all``)."""
        fire = self.cron.latest_fire(now)
        if fire is None or not self.takes_over(fire, now):
            return None
        return fire

    def takes_over(self, fire: datetime.datetime, now: datetime.datetime) -> bool:
        """Whether a scheduler runs ``fire`` at ``now`` if no holder has it: a
        fire missed, or one whose holder vanished. The misfire policy judges
        it by its age alone, whatever came after it: "skip" runs it while
        it is on time, "latest" within the job's ``misfire_deadline``, "all"
        at any age (none runs a fire from before the schedule came into
        force: ``oldest_due()``)."""
        late = now - fire
        if self.misfire == Misfire.SKIP:
            return late <= ON_TIME
        deadline = self.misfire_deadline
        return not (self.misfire == Misfire.LATEST and deadline and late > deadline)

    def fire_of(self, key: str) -> datetime.datetime | None:
        """The fire of this schedule that claims ``key``, or None if none does
        (a key of another schedule, an edited one's)."""
        try:
            start, end = self.slots.bounds(key)
        except ValueError:
            return None
        fire = next(self.cron.fires_after(start - MICROSECOND), None)
        if fire is None or fire >= end or self.slots.key_at(fire) != key:
            return None
        return fire

    def oldest_due(self, since: datetime.datetime) -> datetime.datetime:
        """The oldest fire the schedule has due once in force from ``since``:
        the fire on time at that moment (at most ``ON_TIME`` before it), else
        ``since``. The minute of grace is that one fire's, not every fire of
        the minute: a fire older than it was never due, so never missed."""
        fire = self.cron.latest_fire(since)
        return fire if fire is not None and since - fire <= ON_TIME else since

    def missed_since(
        self, anchor: datetime.datetime, now: datetime.datetime
    ) -> list[tuple[datetime.datetime, str]]:
        """The oldest ``CATCH_UP_LIMIT`` fires after ``anchor`` up to ``now``, oldest first."""
        due = itertools.takewhile(lambda fire: fire <= now, self.cron.fires_after(anchor))
        slots = self.slots
        return [(fire, slots.key_at(fire)) for fire in itertools.islice(due, CATCH_UP_LIMIT)]


def problems(command_class: type[ScheduledCommand]) -> list[str]:
    """What keeps the job's schedules from being used, as sentences naming the fix."""
    # A task schedule names its task and where it was declared; a command, its module.
    name = (
        getattr(command_class, "problem_label", "") or command_class.__module__.rpartition(".")[2]
    )
    if command_class.schedule is None and not command_class.schedules:
        return []
    if shape := _shape_problems(command_class):
        return [f"{name}: {problem}" for problem in shape]
    crons = []
    for entry in entries(command_class):
        if not isinstance(entry.expression, str):
            return [
                f"{name}: schedule must be a string, a cron expression or an interval "
                f"('every 90 minutes'), not {entry.expression!r}"
            ]
        try:
            crons.append(entry.fire_times())
        except ValueError as error:
            return [f"{name}: {error}"]
    found = []
    if command_class.misfire not in Misfire.choices:
        found.append(
            f"{name}: misfire {command_class.misfire!r} is not one of "
            f"{', '.join(map(repr, Misfire.choices))}"
        )
    found.extend(f"{name}: {problem}" for problem in _deadline_problems(command_class))
    found.extend(f"{name}: {problem}" for problem in _overlap_problems(command_class))
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
    name: str, cron: FireTimes, window: windows.CalendarWindow | windows.FixedWindow
) -> list[str]:
    """Why the job's declared window cannot key the fires of ``cron``, if it cannot."""
    if isinstance(window, windows.FixedWindow):
        return _gap_shorter_than(name, cron, window)
    if cron.time_zone not in (None, wall_times.project_zone_name()):
        return [
            f"{name}: time_zone {cron.time_zone!r} and window {window.name!r} disagree: a "
            f"calendar window follows TIME_ZONE ({wall_times.project_zone_name()}); "
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
            f"schedules must be a list of jobclaims.Schedule, not {listed!r}; write "
            "schedules = [Schedule('0 * * * *', args=['--region', 'eu']), ...]"
        ]
    found = []
    for each in listed:
        any_arguments = getattr(command_class, "takes_any_arguments", False)
        if isinstance(each.args, str) or not (
            any_arguments or all(isinstance(arg, str) for arg in each.args)
        ):
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
    same: dict[tuple[object, ...], str] = {}
    for each in entries(command_class):
        # A task's arguments may be lists or dicts: compared by their repr.
        arguments = (repr(tuple(each.args)), repr(sorted(each.kwargs.items())))
        what = (*arguments, " ".join(str(each.expression).split()), each.time_zone)
        if what in same and same[what] != each.given_name:
            found.append(
                f"its schedules {same[what]!r} and {each.given_name!r} are one schedule (the "
                "same expression, time zone and arguments), so they would share their "
                "fires; remove one of them"
            )
        same.setdefault(what, each.given_name)
    job = command_class.job_name or command_class.__module__.rpartition(".")[2]
    for given in dict.fromkeys(names):
        claimed = naming.claim_name(job, given)
        if len(claimed) > _LONGEST_JOB_NAME:
            found.append(
                f"the claim name {claimed[:40]!r}… of a schedule is longer than the "
                f"{_LONGEST_JOB_NAME} characters a job name holds; give it a shorter name="
            )
    return found


def _jitter_problems(jitter: datetime.timedelta | None, crons: list[FireTimes]) -> list[str]:
    """What is wrong with the job's ``jitter``: it must be positive, and
    shorter than any gap between two fires, or a fire could start after
    the next one."""
    if problem := durations.problem(jitter, none_means="for no jitter"):
        return [f"jitter {problem}"]
    if jitter is None:
        return []
    for cron in crons:
        first, second = cron.shortest_gap()
        if jitter >= second - first:
            return [
                f"jitter {jitter} is not shorter than the {second - first} between two "
                f"fires of {cron.expression!r}, so a fire could start after the next one; "
                "make it shorter"
            ]
    return []


def _overlap_problems(command_class: type[ScheduledCommand]) -> list[str]:
    """What is wrong with the job's ``overlap`` (or a schedule's), as
    sentences naming the fix, each said once."""
    given = [command_class.overlap, *(each.overlap for each in entries(command_class))]
    found = (overlap_problem(each, command_class) for each in given if each is not None)
    return list(dict.fromkeys(problem for problem in found if problem is not None))


def overlap_problem(overlap: str, command_class: type[ScheduledCommand]) -> str | None:
    """What is wrong with the policy ``overlap`` for a schedule of
    ``command_class``, naming the fix; None if nothing is."""
    if overlap not in Overlap.choices:
        return f"overlap {overlap!r} is not one of {', '.join(map(repr, Overlap.choices))}"
    if command_class.allow_overlap and overlap != Overlap.ALLOW:
        return (
            f"overlap {overlap!r} and allow_overlap = True disagree; remove allow_overlap "
            "(overlap = 'allow' is what it says)"
        )
    if overlap in Overlap.holding_back and command_class.misfire == Misfire.ALL:
        return (
            f"overlap {overlap!r} and misfire = 'all' disagree: 'all' already runs each "
            "fire an overlap held back, in turn, once the run before it ends; remove one"
        )
    return None


def _deadline_problems(command_class: type[ScheduledCommand]) -> list[str]:
    """What is wrong with the job's ``misfire_deadline``, as sentences naming the fix.

    Under ``ON_TIME`` it would be a deadline no fire is held to: a fire
    that late is on time. With ``misfire = "skip"`` there is no missed fire
    for it to bound.
    """
    deadline = command_class.misfire_deadline
    if deadline is None:
        return []
    if problem := durations.problem(deadline, none_means="for no deadline"):
        return [f"misfire_deadline {problem}"]
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
    cron: FireTimes, window: windows.CalendarWindow
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


def _gap_shorter_than(name: str, cron: FireTimes, window: windows.FixedWindow) -> list[str]:
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


def _zone_shift(cron: FireTimes) -> datetime.timedelta:
    """How much nearer two fires can come than their wall times say: the
    largest change of UTC offset the schedule's zone makes (an hour for most
    zones with daylight saving, none for UTC)."""
    zone = wall_times.project_zone() if cron.time_zone is None else named_zone(cron.time_zone)
    start = timezone.now()
    offsets = {
        (start + offset * datetime.timedelta(days=7)).astimezone(zone).utcoffset()
        for offset in range(53 * 2)
    }
    known = [offset for offset in offsets if offset is not None]
    return max(known) - min(known)


def _show(cron: FireTimes, moment: datetime.datetime) -> str:
    return f"{cron.local(moment):%Y-%m-%d %H:%M:%S %Z}"
