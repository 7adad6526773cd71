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
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import router
from django.db.models import Model

from jobclaims import durations, leases

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


def _optional_path(value: object) -> str:
    if value is None or (isinstance(value, (str, os.PathLike)) and str(value)):
        return ""
    return f"must be a file path (a str or pathlib.Path) or None, not {value!r}"


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
    # per job; jobs left out get one window (see jobclaims.health).
    "HEALTH_GRACE": _Setting({}, _graces),
    # The node_exporter textfile the Prometheus metrics are added up in, or
    # None to keep them in the process (jobclaims.contrib.prometheus).
    "METRICS_TEXTFILE": _Setting(None, _optional_path),
    # How far back health counts the missed fires and windows of a job.
    "MISSED_LOOK_BACK": _Setting(datetime.timedelta(days=1), durations.problem),
    # How long after a scheduler was last seen it no longer counts as live.
    "SCHEDULER_GRACE": _Setting(datetime.timedelta(minutes=3), durations.problem),
    # How long a stopped jobclaims_scheduler lets its running jobs finish
    # before it interrupts them and hands their fires off; --grace overrides
    # it. Below Kubernetes' default terminationGracePeriodSeconds (30 s).
    "STOP_GRACE": _Setting(datetime.timedelta(seconds=25), _span_from_zero),
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
        bounds: see ``jobclaims.health``)."""
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
    def metrics_textfile(self) -> str | None:
        """Where the Prometheus metrics are added up, or None to keep them in the process."""
        path = cast("str | os.PathLike[str] | None", self._value("METRICS_TEXTFILE"))
        return None if path is None else os.fspath(path)

    @property
    def stop_grace(self) -> datetime.timedelta:
        """How long a stopped scheduler waits for its running jobs to finish."""
        return cast(datetime.timedelta, self._value("STOP_GRACE"))

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
