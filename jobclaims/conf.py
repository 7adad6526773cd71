"""jobclaims' settings: one ``JOBCLAIMS`` dict in the project's settings.

Every value is read from ``django.conf.settings`` when it is first used,
never at import time, and kept until Django says the setting changed
(``setting_changed``, which ``override_settings(JOBCLAIMS=...)`` and
pytest-django's ``settings`` send), so tests can change it; nothing is ever
written back into the project's settings::

    JOBCLAIMS = {
        "DEFAULT_LEASE": datetime.timedelta(minutes=30),
        "DATABASE": "primary",
    }

Keys left out take their defaults. ``manage.py check`` reports a bad value
as ``jobclaims.E003``; reading one raises ``ImproperlyConfigured`` with the
same message, so a job never runs on a setting it misread.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import router
from django.db.models import Model

from jobclaims.time import durations, leases

SETTING_NAME = "JOBCLAIMS"


@dataclass(frozen=True)
class _Setting:
    default: object
    #: Returns what is wrong with a value, or "" when it is fine.
    problem: Callable[[object], str]


def _span_from_zero(value: object) -> str:
    return durations.problem(value, zero=True)


def _database_alias(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        return f"must be a database alias (a str) or None, not {value!r}"
    if value not in django_settings.DATABASES:
        known = ", ".join(repr(alias) for alias in django_settings.DATABASES)
        return f"is {value!r}, which is not in DATABASES (it has {known})"
    return ""


def _graces(value: object) -> str:
    if isinstance(value, Mapping) and all(
        isinstance(job, str) and not durations.problem(grace) for job, grace in value.items()
    ):
        return ""
    return f"must be a dict of job names to positive datetime.timedelta values, not {value!r}"


#: What a ``TASK_SCHEDULES`` entry may hold besides "task" and "schedule":
#: the options of ``jobclaims.scheduled()``.
TASK_SCHEDULE_OPTIONS = frozenset(
    {
        "args",
        "kwargs",
        "time_zone",
        "jitter",
        "misfire",
        "misfire_deadline",
        "retries",
        "retry_backoff",
        "retry_backoff_max",
        "lease",
    }
)


def _task_schedules(value: object) -> str:
    """The shape of ``TASK_SCHEDULES``; what each value means is checked where
    the schedules are built (``jobclaims.jobs.task_schedules``), as for a job's."""
    example = (
        'a dict of names to dicts like {"task": "billing.tasks.nightly_report", '
        '"schedule": "0 3 * * *"}'
    )
    if not isinstance(value, Mapping):
        return f"must be {example}, not {value!r}"
    for name, entry in value.items():
        if not isinstance(name, str) or not name.strip():
            return f"has the name {name!r}; each schedule's name must be a non-empty str"
        if not isinstance(entry, Mapping):
            return f"[{name!r}] must be {example}, not {entry!r}"
        if not isinstance(entry.get("task"), str) or not entry["task"]:
            return f'[{name!r}] must name its task by dotted path: "task": "app.tasks.name"'
        if "schedule" not in entry:
            return f'[{name!r}] has no "schedule": give it a cron expression, "0 3 * * *"'
        unknown = set(entry) - TASK_SCHEDULE_OPTIONS - {"task", "schedule"}
        if unknown:
            known = ", ".join(sorted(TASK_SCHEDULE_OPTIONS | {"task", "schedule"}))
            return f"[{name!r}] has the unknown key {sorted(unknown)[0]!r}; the keys are {known}"
        if not isinstance(entry.get("args", []), (list, tuple)):
            return f'[{name!r}]["args"] must be a list, not {entry["args"]!r}'
        if not isinstance(entry.get("kwargs", {}), Mapping):
            return f'[{name!r}]["kwargs"] must be a dict, not {entry["kwargs"]!r}'
    return ""


def _optional_path(value: object) -> str:
    if value is None or (isinstance(value, (str, os.PathLike)) and str(value)):
        return ""
    return f"must be a file path (a str or pathlib.Path) or None, not {value!r}"


def _history_age(value: object) -> str:
    """A positive span, or None; never shorter than the look-back health reads
    missed runs from (``MISSED_LOOK_BACK``), or the fires deleted would count as missed."""
    if problem := durations.problem(value, none_means="to keep history of any age"):
        return problem
    if value is None:
        return ""
    configured = getattr(django_settings, SETTING_NAME, {})
    look_back = configured.get("MISSED_LOOK_BACK") if isinstance(configured, Mapping) else None
    if not isinstance(look_back, datetime.timedelta):
        look_back = SETTINGS["MISSED_LOOK_BACK"].default
    assert isinstance(value, datetime.timedelta)
    assert isinstance(look_back, datetime.timedelta)
    if value < look_back:
        return (
            f"is {value}, shorter than MISSED_LOOK_BACK ({look_back}): health would take the "
            "runs it deletes for missed ones; keep at least MISSED_LOOK_BACK, or shorten it"
        )
    return ""


#: The fewest runs ``HISTORY_MAX_ROWS_PER_JOB`` may keep per job.
MIN_ROWS_PER_JOB = 100


def _rows_per_job(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_ROWS_PER_JOB:
        return (
            f"must be a whole number of at least {MIN_ROWS_PER_JOB} (the runs health judges a "
            f"job's usual duration and failures by), or None for no bound, not {value!r}"
        )
    return ""


def _retention_every(value: object) -> str:
    return durations.problem(value, none_means="to leave pruning to jobclaims_prune")


def _bytes_kept(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return f"must be a whole number of bytes, 0 or more (0 keeps none), not {value!r}"
    return ""


#: The kinds of monitor a ``MONITORS`` entry (or a job's ``monitors``) names,
#: each by the key that carries its address (``jobclaims.running.checkins``).
MONITOR_KINDS = ("sentry", "ping", "webhook")


def monitor_problem(entry: object) -> str:
    """What is wrong with one monitor entry, or "": ``{"ping": URL}``,
    ``{"webhook": URL}`` or ``{"sentry": True}`` (or a slug), and for a
    ``MONITORS`` entry an optional ``"jobs"`` list."""
    example = '{"ping": "https://hc-ping.com/KEY/{job}"}, {"webhook": URL} or {"sentry": True}'
    if not isinstance(entry, Mapping):
        return f"must be a dict like {example}, not {entry!r}"
    kinds = [kind for kind in MONITOR_KINDS if kind in entry]
    if len(kinds) != 1:
        return f"must name one monitor, like {example}, not {dict(entry)!r}"
    kind = kinds[0]
    unknown = set(entry) - {kind, "jobs"}
    if unknown:
        return f"has the unknown key {sorted(unknown)[0]!r}; beside {kind!r} it may have 'jobs'"
    address = entry[kind]
    if kind == "sentry":
        if address is not True and not (isinstance(address, str) and address):
            return f"['sentry'] must be True or a slug ('{{job}}' is the job), not {address!r}"
        if importlib.util.find_spec("sentry_sdk") is None:
            return "names Sentry, but sentry-sdk is not installed: pip install jobclaims[sentry]"
    elif not isinstance(address, str) or not address.startswith(("http://", "https://")):
        return f"[{kind!r}] must be an http:// or https:// URL, not {address!r}"
    jobs = entry.get("jobs")
    if jobs is not None and (
        isinstance(jobs, str)
        or not isinstance(jobs, Sequence)
        or not all(isinstance(job, str) for job in jobs)
    ):
        return f"['jobs'] must be a list of job names, not {jobs!r}"
    return ""


def _monitors(value: object) -> str:
    if isinstance(value, (str, Mapping)) or not isinstance(value, Sequence):
        return f'must be a list of monitors, like [{{"sentry": True}}], not {value!r}'
    for index, entry in enumerate(value):
        if problem := monitor_problem(entry):
            return f"entry {index}: {problem}"
    return ""


SETTINGS: Mapping[str, _Setting] = {
    # The lease a JobCommand takes when it sets none and --lease is not given.
    "DEFAULT_LEASE": _Setting(datetime.timedelta(minutes=10), leases.problem),
    # The alias claims are written to; None follows the router's db_for_write.
    "DATABASE": _Setting(None, _database_alias),
    # How far this host's clock may drift from the database's before a warning.
    "CLOCK_SKEW_WARNING": _Setting(datetime.timedelta(minutes=1), durations.problem),
    # How long a claim's commit may wait for a synchronous standby (PostgreSQL).
    "STANDBY_TIMEOUT": _Setting(datetime.timedelta(seconds=30), durations.problem),
    # How long past the start of its window a job's run may take to succeed,
    # per job; jobs left out get one window (see jobclaims.monitoring.health).
    "HEALTH_GRACE": _Setting({}, _graces),
    # The node_exporter textfile the Prometheus metrics are added up in, or
    # None to keep them in the process (jobclaims.contrib.prometheus).
    "METRICS_TEXTFILE": _Setting(None, _optional_path),
    # How far back health counts the missed fires and windows of a job.
    "MISSED_LOOK_BACK": _Setting(datetime.timedelta(days=1), durations.problem),
    # How long after a scheduler was last seen it no longer counts as live.
    "SCHEDULER_GRACE": _Setting(datetime.timedelta(minutes=3), durations.problem),
    # How long --check, the health page and the metrics wait for the health
    # reads before they say they cannot tell: inside Prometheus' 10 s scrape
    # timeout (see jobclaims.monitoring.bounded).
    "HEALTH_TIMEOUT": _Setting(datetime.timedelta(seconds=5), durations.problem),
    # How long a stopped jobclaims_scheduler lets its running jobs finish
    # before it interrupts them and hands their fires off; --grace overrides
    # it. Below Kubernetes' default terminationGracePeriodSeconds (30 s).
    "STOP_GRACE": _Setting(datetime.timedelta(seconds=25), _span_from_zero),
    # How long a task fire's claim is held once its message is enqueued, until
    # a worker adopts it (and renews it to the schedule's lease): a queue that
    # is slow to reach it must not have it taken over and enqueued again. A
    # message the queue lost is enqueued again after this long.
    "QUEUE_LEASE": _Setting(datetime.timedelta(hours=1), leases.problem),
    # Schedules whose target is a task, for teams moving from Celery beat:
    # {"name": {"task": "billing.tasks.nightly_report", "schedule": "0 3 * * *"}}
    # (jobclaims.jobs.task_schedules).
    "TASK_SCHEDULES": _Setting({}, _task_schedules),
    # Operations that look after themselves (issue 37), together:
    # History older than this is deleted by the schedulers (runs and skips
    # alike, never a row that keeps a slot from running twice); None keeps it.
    "HISTORY_MAX_AGE": _Setting(datetime.timedelta(days=30), _history_age),
    # Each job keeps at most this many finished runs, and as many skips,
    # besides those of the look-back; None: no bound by count.
    "HISTORY_MAX_ROWS_PER_JOB": _Setting(10_000, _rows_per_job),
    # How often one of the schedulers prunes the history to those bounds
    # (jobclaims.scheduling.retention); None leaves it to jobclaims_prune.
    "RETENTION_EVERY": _Setting(datetime.timedelta(minutes=10), _retention_every),
    # The last this many bytes a JobCommand's run printed (stdout and stderr)
    # are kept with its run; 0 keeps nothing.
    "OUTPUT_KEPT": _Setting(16 * 1024, _bytes_kept),
    # Where each run checks in from its own process: Sentry Crons, ping URLs,
    # webhooks (jobclaims.running.checkins).
    "MONITORS": _Setting([], _monitors),
    # How long a check-in may take, and the longest a job's process waits for
    # those still unsent when it exits.
    "MONITOR_TIMEOUT": _Setting(datetime.timedelta(seconds=3), durations.problem),
}


def problems() -> list[str]:
    """Every way the ``JOBCLAIMS`` setting is wrong, as sentences that name the fix."""
    configured = getattr(django_settings, SETTING_NAME, {})
    if not isinstance(configured, Mapping):
        return [f"{SETTING_NAME} must be a dict, not {type(configured).__name__}"]
    found = []
    for key in configured:
        if key not in SETTINGS:
            known = ", ".join(SETTINGS)
            found.append(f"{SETTING_NAME} has an unknown key {key!r}; the keys are {known}")
    for key, setting in SETTINGS.items():
        if key in configured and (problem := setting.problem(configured[key])):
            found.append(f"{SETTING_NAME}[{key!r}] {problem}")
    return found


class JobClaimsSettings:
    """Typed, lazy access to ``settings.JOBCLAIMS`` with its defaults filled in.

    Each value is validated once and kept: every claim reads several of
    them, and reading ``JOBCLAIMS`` afresh (an ``AttributeError`` caught
    inside Django's lazy settings when the project sets none) cost a
    claim more client CPU than some of its statements. ``forget()``, on
    ``setting_changed``, makes the next read see the change. A value that
    is wrong is not kept: every read of it raises.
    """

    def __init__(self) -> None:
        self._validated: dict[str, object] = {}

    @property
    def default_lease(self) -> datetime.timedelta:
        """How long a claim lasts when the job sets no lease of its own."""
        return cast(datetime.timedelta, self._value("DEFAULT_LEASE"))

    @property
    def database(self) -> str | None:
        """The alias claims are written to, or None to ask the router."""
        return cast("str | None", self._value("DATABASE"))

    def claims_database(self, model: type[Model]) -> str:
        """The alias ``model``'s claims are written to and read back from.

        ``DATABASE`` when it is set, else the router's choice for writes: a
        claim read from a lagging replica could let a second instance in.
        """
        return self.database or router.db_for_write(model)

    @property
    def clock_skew_warning(self) -> datetime.timedelta:
        """The drift between this host's clock and the database's worth a warning."""
        return cast(datetime.timedelta, self._value("CLOCK_SKEW_WARNING"))

    @property
    def standby_timeout(self) -> datetime.timedelta:
        """How long a commit may wait for a synchronous standby before it is cancelled."""
        return cast(datetime.timedelta, self._value("STANDBY_TIMEOUT"))

    def health_grace(self, job: str) -> datetime.timedelta | None:
        """The grace ``job``'s runs have to succeed, or None for the default
        (one window; for a scheduled job, the time to its next fire, within
        bounds: see ``jobclaims.monitoring.health``)."""
        graces = cast("Mapping[str, datetime.timedelta]", self._value("HEALTH_GRACE"))
        return graces.get(job)

    @property
    def missed_look_back(self) -> datetime.timedelta:
        """How far back a fire or window no instance claimed counts as missed."""
        return cast(datetime.timedelta, self._value("MISSED_LOOK_BACK"))

    @property
    def scheduler_grace(self) -> datetime.timedelta:
        """How long a scheduler last seen this long ago still counts as live."""
        return cast(datetime.timedelta, self._value("SCHEDULER_GRACE"))

    @property
    def health_timeout(self) -> datetime.timedelta:
        """How long the alarm path waits for the health reads before it cannot tell."""
        return cast(datetime.timedelta, self._value("HEALTH_TIMEOUT"))

    @property
    def metrics_textfile(self) -> str | None:
        """Where the Prometheus metrics are added up, or None to keep them in the process."""
        path = cast("str | os.PathLike[str] | None", self._value("METRICS_TEXTFILE"))
        return None if path is None else os.fspath(path)

    @property
    def stop_grace(self) -> datetime.timedelta:
        """How long a stopped scheduler waits for its running jobs to finish."""
        return cast(datetime.timedelta, self._value("STOP_GRACE"))

    @property
    def queue_lease(self) -> datetime.timedelta:
        """How long an enqueued task fire is held until a worker adopts it."""
        return cast(datetime.timedelta, self._value("QUEUE_LEASE"))

    @property
    def task_schedules(self) -> Mapping[str, Mapping[str, object]]:
        """The task schedules the settings declare, by name."""
        return cast("Mapping[str, Mapping[str, object]]", self._value("TASK_SCHEDULES"))

    @property
    def history_max_age(self) -> datetime.timedelta | None:
        """How old history may grow before the schedulers delete it; None: any age."""
        return cast("datetime.timedelta | None", self._value("HISTORY_MAX_AGE"))

    @property
    def history_max_rows_per_job(self) -> int | None:
        """How many finished runs, and skips, each job keeps at most; None: no bound."""
        return cast("int | None", self._value("HISTORY_MAX_ROWS_PER_JOB"))

    @property
    def retention_every(self) -> datetime.timedelta | None:
        """How often a scheduler prunes history to its bounds; None: never."""
        return cast("datetime.timedelta | None", self._value("RETENTION_EVERY"))

    @property
    def output_kept(self) -> int:
        """How many bytes of a run's output, its last, are kept with it."""
        return cast(int, self._value("OUTPUT_KEPT"))

    @property
    def monitors(self) -> Sequence[Mapping[str, object]]:
        """The monitors runs check in with (``jobclaims.running.checkins``)."""
        return cast("Sequence[Mapping[str, object]]", self._value("MONITORS"))

    @property
    def monitor_timeout(self) -> datetime.timedelta:
        """How long one check-in may take, and an exit may wait for the unsent."""
        return cast(datetime.timedelta, self._value("MONITOR_TIMEOUT"))

    def forget(self) -> None:
        """Read every value afresh at its next use."""
        self._validated.clear()

    def _value(self, key: str) -> object:
        """The value of ``key``, validated: the properties cast it to what it now is."""
        try:
            return self._validated[key]
        except KeyError:
            value = self._validated[key] = self._read(key)
            return value

    def _read(self, key: str) -> object:
        """The value of ``key`` in the settings, validated."""
        configured = getattr(django_settings, SETTING_NAME, {})
        if not isinstance(configured, Mapping):
            raise ImproperlyConfigured(problems()[0])
        if key not in configured:
            return SETTINGS[key].default
        value = configured[key]
        if problem := SETTINGS[key].problem(value):
            raise ImproperlyConfigured(f"{SETTING_NAME}[{key!r}] {problem}")
        return value


jobclaims_settings = JobClaimsSettings()

#: Settings a value depends on: ``DATABASE`` is checked against ``DATABASES``.
_READ_FROM = frozenset({SETTING_NAME, "DATABASES"})


def _forget_on_change(*, setting: str, **kwargs: object) -> None:
    """Forget the values read, when a setting they were read from changed."""
    if setting in _READ_FROM:
        jobclaims_settings.forget()


setting_changed.connect(_forget_on_change, dispatch_uid="jobclaims.conf")
