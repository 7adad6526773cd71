"""A job's schedules: what a ``JobCommand`` declares, and whether it can work.

A ``JobCommand`` with ``schedule = "5 2 * * *"`` fires at those times
(``jobclaims.cron``), and each fire time is a window: every instance that
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
its own claim name (``jobclaims.schedule_names``) and arguments. ``jitter``
delays each fire's start, after its claim, by a random moment within it
(``jobclaims.scheduler``); the fire and its key stay the fire time.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from django.utils import timezone

from jobclaims import attempts, durations, leases, schedule_names, timeouts, windows
from jobclaims.attempts import RetryPolicy
from jobclaims.cron import CronSchedule, named_zone
from jobclaims.slots import Slots

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

    def lease_for(self, given: datetime.timedelta | None) -> datetime.timedelta: ...


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
                lease=command.lease_for(None),
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
    def slots(self) -> Slots:
        """How its time is cut: each fire a slot, keyed by the declared window if it has one."""
        return Slots(self.window, self.cron)

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
        slots = self.slots
        return [(fire, slots.key_at(fire)) for fire in itertools.islice(due, CATCH_UP_LIMIT)]


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


def _zone_shift(cron: CronSchedule) -> datetime.timedelta:
    """How much nearer two fires can come than their wall times say: the
    largest change of UTC offset the schedule's zone makes (an hour for most
    zones with daylight saving, none for UTC)."""
    zone = timezone.get_current_timezone() if cron.time_zone is None else named_zone(cron.time_zone)
    start = timezone.now()
    offsets = {
        (start + offset * datetime.timedelta(days=7)).astimezone(zone).utcoffset()
        for offset in range(53 * 2)
    }
    known = [offset for offset in offsets if offset is not None]
    return max(known) - min(known)


def _show(cron: CronSchedule, moment: datetime.datetime) -> str:
    return f"{cron.local(moment):%Y-%m-%d %H:%M:%S %Z}"
