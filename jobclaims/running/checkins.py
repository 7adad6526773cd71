"""Check-ins: each run tells monitors outside the claims database that it
started, and how it ended.

Every alarm health raises is read from the claims database, so when that
database, or every host, is down, ``--check``, the health page and the
metrics can at best say "cannot tell". A monitor outside that knows when a
job is due (a dead man's switch) still speaks then: Sentry Crons, a
healthchecks.io-style ping URL, or a webhook of one's own
(``JOBCLAIMS["MONITORS"]``, or a ``JobCommand``'s ``monitors``).

The check-ins are sent by the run's own process, the one holding the claim:
when its run starts (``start``), and once its outcome is recorded
(``success`` or ``failure``). An instance that skips sends nothing, so each
run checks in once however many hosts started. A host that died, a claims
database that refused every claim, a scheduler gone: none sends anything,
and the monitor, which knows the schedule, marks the run missed.

A monitor that hangs or refuses never slows a run nor fails it. Ping and
webhook requests leave from one thread per process, through a bounded queue
(``QUEUED``; a full queue drops the newest, with a warning), each request
given up after ``JOBCLAIMS["MONITOR_TIMEOUT"]``; at exit the process waits
at most that long for those still unsent. Sentry's go through sentry-sdk's
own crons API and background transport (``capture_checkin``), with the
schedule in its ``monitor_config`` so that Sentry knows when one is missed.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import json
import logging
import os
import queue
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.utils.text import slugify

from jobclaims.claims import naming
from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun
from jobclaims.time import wall_times
from jobclaims.time.cron import ALIASES
from jobclaims.time.fire_times import FireTimes
from jobclaims.time.intervals import IntervalSchedule, is_interval
from jobclaims.time.windows import CalendarWindow, FixedWindow, from_name

logger = logging.getLogger("jobclaims")

#: Requests waiting to be sent at most; past it the newest are dropped.
QUEUED = 100
#: The most of a run's output a ping carries (healthchecks.io keeps 100 KB).
PING_BODY = 10_000
#: How long after its fire time a run may check in and still be on time, in
#: whole minutes as Sentry counts: ``jobclaims.jobs.schedules.ON_TIME``.
CHECKIN_MARGIN_MINUTES = 1

START, SUCCESS, FAILURE = "start", "success", "failure"

#: A calendar window's period, as the interval a monitor is told. Not a
#: crontab: a job your own cron starts runs at whatever time of its window
#: your crontab says (02:05 in a daily window), which only an interval, counted
#: from its last check-in, leaves room for.
_WINDOW_INTERVALS = {
    "minutely": (1, "minute"),
    "hourly": (1, "hour"),
    "daily": (1, "day"),
    "weekly": (1, "week"),
    "monthly": (1, "month"),
}


@dataclass(frozen=True)
class Cadence:
    """When a job is due, as a monitor must know to tell a missed run.

    ``schedule`` is Sentry's: ``{"type": "crontab", "value": "5 2 * * *"}``
    or ``{"type": "interval", "value": 10, "unit": "minute"}``; None when
    it cannot say (a schedule finer than a minute, which Sentry does not
    take): the monitor must then be set up by hand.
    """

    schedule: Mapping[str, object] | None = None
    time_zone: str = "UTC"
    #: How long a run may take before Sentry calls it timed out: the job's
    #: ``timeout`` or ``max_run_time``; None: Sentry's default, 30 minutes.
    max_runtime: datetime.timedelta | None = None

    @classmethod
    def of_cron(
        cls, expression: str, time_zone: str, max_runtime: datetime.timedelta | None = None
    ) -> Cadence:
        """A cron expression's cadence: five fields are Sentry's crontab as
        they are; six, when the seconds field is ``0``."""
        fields = ALIASES.get(expression.strip().lower(), expression).split()
        if len(fields) == 6 and fields[0] == "0":
            fields = fields[1:]
        if len(fields) != 5:
            return cls(None, time_zone, max_runtime)
        return cls({"type": "crontab", "value": " ".join(fields)}, time_zone, max_runtime)

    @classmethod
    def of_schedule(
        cls, fires: FireTimes, max_runtime: datetime.timedelta | None = None
    ) -> Cadence:
        """A schedule's cadence: an interval's period as Sentry's interval, a
        cron expression as its crontab."""
        if isinstance(fires, IntervalSchedule):
            return cls(_interval(fires.period), fires.zone_name, max_runtime)
        return cls.of_cron(fires.expression, fires.zone_name, max_runtime)

    @classmethod
    def of_recorded(cls, schedule: str, max_runtime: datetime.timedelta | None = None) -> Cadence:
        """The cadence a claim's recorded schedule says (``JobRun.schedule``):
        a window's period, an interval's, or a cron expression's fires (in
        ``TIME_ZONE``)."""
        try:
            window = from_name(schedule)
        except ValueError:
            if is_interval(schedule):
                with contextlib.suppress(ValueError):
                    return cls.of_schedule(IntervalSchedule(schedule), max_runtime)
                return cls(None, "UTC", max_runtime)
            if len(schedule.split()) in (5, 6) or schedule.startswith("@"):
                zone = wall_times.project_zone_name()
                return cls.of_cron(schedule, zone, max_runtime)
            return cls(None, "UTC", max_runtime)
        zone = wall_times.project_zone_name()
        if isinstance(window, CalendarWindow):
            value, unit = _WINDOW_INTERVALS[window.name]
            return cls({"type": "interval", "value": value, "unit": unit}, zone, max_runtime)
        assert isinstance(window, FixedWindow)
        return cls(_interval(window.size), zone, max_runtime)

    def monitor_config(self) -> dict[str, object] | None:
        """Sentry's ``monitor_config``, or None when the schedule cannot be told."""
        if self.schedule is None:
            return None
        config: dict[str, object] = {
            "schedule": dict(self.schedule),
            "timezone": self.time_zone,
            "checkin_margin": CHECKIN_MARGIN_MINUTES,
        }
        if self.max_runtime is not None:
            # Whole minutes, rounded up: Sentry counts no finer.
            config["max_runtime"] = max(1, -(-int(self.max_runtime.total_seconds()) // 60))
        return config


def _interval(size: datetime.timedelta) -> dict[str, object] | None:
    """A fixed window's size as Sentry's interval, in its largest whole unit."""
    seconds = int(size.total_seconds())
    for unit, length in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % length == 0 and seconds:
            return {"type": "interval", "value": seconds // length, "unit": unit}
    return None


@dataclass(frozen=True)
class Event:
    """One check-in of one run: what every monitor is told."""

    kind: str
    job: str
    window: str
    attempt: int
    owner: str
    #: The claim's token, drawn anew by each attempt: a check-in's id.
    token: str
    #: Seconds since the run started, for an end.
    duration: float | None = None
    #: The error's first line, for a failure.
    error: str = ""
    #: The end of what the run printed, if it was captured.
    output: str | None = None

    def as_document(self) -> dict[str, object]:
        return {
            "event": self.kind,
            "job": self.job,
            "window": self.window,
            "attempt": self.attempt,
            "owner": self.owner,
            "run_token": self.token,
            "duration": self.duration,
            "error": self.error,
            "output": self.output,
        }


class Monitor:
    """Where a run's check-ins go; a monitor's failure is logged, never raised."""

    kind = ""

    def check_in(self, event: Event, cadence: Cadence) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class SentryCrons(Monitor):
    """Sentry Crons, through sentry-sdk's crons API: the project's own
    ``sentry_sdk.init()`` says where. Each attempt is one check-in, opened
    ``in_progress`` and closed ``ok`` or ``error`` under the same id."""

    kind = "sentry"
    #: The monitor's slug; ``{job}`` is the job's name, made a slug.
    slug: str = "{job}"

    def check_in(self, event: Event, cadence: Cadence) -> None:
        import sentry_sdk
        from sentry_sdk.crons import capture_checkin

        if not sentry_sdk.get_client().is_active():
            _warn_once(
                "sentry",
                "JOBCLAIMS['MONITORS'] names Sentry, but sentry-sdk has no DSN in this "
                "process: call sentry_sdk.init(dsn=...) in the settings; no check-in was sent",
            )
            return
        status = {START: "in_progress", SUCCESS: "ok", FAILURE: "error"}[event.kind]
        capture_checkin(
            monitor_slug=self.slug_of(event.job),
            check_in_id=event.token,
            status=status,
            duration=event.duration,
            monitor_config=cadence.monitor_config(),  # type: ignore[arg-type]
        )

    def slug_of(self, job: str) -> str:
        """The monitor's slug: at most 50 characters, as Sentry allows."""
        return slugify(self.slug.replace("{job}", job.replace("[", "-")))[:50]


@dataclass(frozen=True)
class Ping(Monitor):
    """A healthchecks.io-compatible ping URL: ``/start`` when a run starts,
    the URL itself on success, ``/fail`` on failure; ``{job}`` in the URL is
    the job's name as a slug. Each ping carries the attempt as its run id
    (``rid``), and an end carries the run's output (and error) as its body."""

    kind = "ping"
    url: str = ""

    def check_in(self, event: Event, cadence: Cadence) -> None:
        suffix = {START: "/start", SUCCESS: "", FAILURE: "/fail"}[event.kind]
        address = urllib.parse.urlsplit(self.url.replace("{job}", slugify(event.job)))
        # The attempt's token, as healthchecks.io takes a run id: a UUID.
        query = [*urllib.parse.parse_qsl(address.query), ("rid", str(uuid.UUID(event.token)))]
        url = address._replace(
            path=address.path.rstrip("/") + suffix, query=urllib.parse.urlencode(query)
        ).geturl()
        body = None
        if event.kind != START:
            text = "\n\n".join(part for part in (event.error, event.output) if part)
            body = text.encode("utf-8")[-PING_BODY:]
        _sender().send(urllib.request.Request(url, data=body, method="POST"))


@dataclass(frozen=True)
class Webhook(Monitor):
    """A URL that takes each check-in as a JSON POST (``Event.as_document()``)."""

    kind = "webhook"
    url: str = ""

    def check_in(self, event: Event, cadence: Cadence) -> None:
        document = {**event.as_document(), "monitor_config": cadence.monitor_config()}
        request = urllib.request.Request(
            self.url,
            data=json.dumps(document).encode("utf-8"),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        _sender().send(request)


def monitor_of(entry: Mapping[str, object]) -> Monitor:
    """The monitor a ``MONITORS`` entry (or a job's ``monitors`` entry) names."""
    if "sentry" in entry:
        slug = entry["sentry"]
        return SentryCrons(slug if isinstance(slug, str) else "{job}")
    if "ping" in entry:
        return Ping(str(entry["ping"]))
    return Webhook(str(entry["webhook"]))


def monitors_for(job: str, extra: Iterable[Mapping[str, object]] = ()) -> list[Monitor]:
    """The monitors ``job``'s runs check in with: the ``MONITORS`` entries
    that name it (by its claim name, or for one of its schedules by the
    job's) or name no jobs, and the job's own ``extra`` ones."""
    entries = jobclaims_settings.monitors
    if not entries and not extra:
        return []  # Most projects': asked at every run's start.
    names = {job, naming.parent(job) or job}
    chosen = [
        entry
        for entry in entries
        if entry.get("jobs") is None or names & set(entry["jobs"])  # type: ignore[call-overload]
    ]
    return [monitor_of(entry) for entry in [*chosen, *extra]]


@dataclass
class CheckIns:
    """One run's check-ins with its monitors: ``started()``, then ``finished()``."""

    run: JobRun
    monitors: list[Monitor]
    cadence: Cadence
    _started: float = field(default_factory=time.monotonic)

    @classmethod
    def for_run(
        cls,
        run: JobRun,
        cadence: Cadence | None = None,
        extra: Iterable[Mapping[str, object]] = (),
    ) -> CheckIns:
        """The check-ins of ``run``, with the cadence its caller knows, else
        the one its recorded schedule says."""
        monitors = monitors_for(run.job, extra)
        if cadence is None:
            cadence = Cadence.of_recorded(run.schedule) if monitors else Cadence()
        return cls(run, monitors, cadence)

    def started(self) -> None:
        self._started = time.monotonic()
        self._send(START)

    def finished(self, succeeded: bool, error: str = "", output: str | None = None) -> None:
        duration = time.monotonic() - self._started
        self._send(SUCCESS if succeeded else FAILURE, duration, error, output)

    def _send(
        self, kind: str, duration: float | None = None, error: str = "", output: str | None = None
    ) -> None:
        if not self.monitors:
            return
        run = self.run
        event = Event(
            kind,
            run.job,
            run.window,
            run.attempt,
            run.owner,
            run.token.hex,
            duration,
            error,
            output,
        )
        for monitor in self.monitors:
            try:
                monitor.check_in(event, self.cadence)
            except Exception as error:  # A monitor never fails a run.
                _warn_once(monitor.kind, f"Could not check {run} in with {monitor.kind}: {error!r}")


# Sending in the background.


class _Sender:
    """One thread that sends the check-in requests of this process, in order,
    each given up after ``MONITOR_TIMEOUT``."""

    def __init__(self) -> None:
        self.timeout = jobclaims_settings.monitor_timeout.total_seconds()
        self.queue: queue.Queue[urllib.request.Request] = queue.Queue(QUEUED)
        self.thread = threading.Thread(target=self._send_all, name="jobclaims check-ins")
        self.thread.daemon = True
        self.thread.start()
        atexit.register(self.flush)

    def send(self, request: urllib.request.Request) -> None:
        try:
            self.queue.put_nowait(request)
        except queue.Full:
            _warn_once(
                "queue",
                f"Dropped a check-in to {request.full_url}: {QUEUED} wait to be sent already "
                "(the monitor is slow or down)",
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for the requests queued to be sent, at most ``timeout``
        seconds (``MONITOR_TIMEOUT``); return whether all were."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self.queue.all_tasks_done:
            while self.queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.queue.all_tasks_done.wait(left)
        return True

    def _send_all(self) -> None:
        while True:
            request = self.queue.get()
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read()
            except Exception as error:
                _warn_once(
                    request.full_url, f"Could not check in with {request.full_url}: {error!r}"
                )
            finally:
                self.queue.task_done()


_SENDER: _Sender | None = None
_SENDER_LOCK = threading.Lock()


def _sender() -> _Sender:
    """This process's sender, started with its first check-in."""
    global _SENDER
    with _SENDER_LOCK:
        if _SENDER is None:
            _SENDER = _Sender()
        return _SENDER


def flush(timeout: float | None = None) -> bool:
    """Wait for this process's queued check-ins to be sent (at most ``timeout``)."""
    return True if _SENDER is None else _SENDER.flush(timeout)


def _forget_sender() -> None:
    """A forked child (a Celery worker's pool) starts a sender of its own:
    the parent's thread is not in it."""
    global _SENDER, _SENDER_LOCK
    _SENDER, _SENDER_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_sender)

_WARNED: set[str] = set()


def _warn_once(about: str, message: str) -> None:
    """Log ``message`` the first time something goes wrong with ``about`` in
    this process: a monitor down for an hour must not fill the log."""
    if about in _WARNED:
        return
    _WARNED.add(about)
    logger.warning("%s", message)
