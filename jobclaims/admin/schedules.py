"""The admin's schedules page: every scheduled job, and the buttons that steer it.

One row per schedule: its cron expression in words and its time zone, the
next five fires, the last run, the recent runs' durations as a small chart,
whether it is paused, its missed fires and the live schedulers that run it.
Its buttons do what the operator commands do, through the same functions:

- Pause and Resume (``jobclaims.controls.pauses``), for a user who may add job
  pauses, as in the pauses' own admin;
- Run now and Cancel, for a user who may change job runs, as the claims'
  actions need. Run now claims the job's current fire in the request, the
  way ``jobclaims_run`` does (``backfills.claim``): of two admins who click
  at the same instant one wins, and the other is told who holds the fire.
  The winner's job then runs in a process of its own, started as the
  scheduler starts a won fire's (``launch.start_detached()``), so the
  request returns at once and the run outlives a web worker that is
  recycled. Cancel ends the job's running runs (``JobRunQuerySet.cancel``).

The page reads its schedules through ``page_schedules()`` and their time
zone through ``time_zone_of()``: the one place that knows how a job's
schedules and zones are declared. Every button's change lands in the admin
log, in the admin user's name; buttons are POSTs under the admin's CSRF
protection, and a POST without the permission is refused with 403.
"""

from __future__ import annotations

import datetime
import statistics
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.admin.views.main import PAGE_VAR
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import F, OuterRef, Window
from django.db.models.functions import RowNumber
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from jobclaims.claims import naming
from jobclaims.claims.rule import Refusal
from jobclaims.conf import jobclaims_settings
from jobclaims.controls import backfills, pauses
from jobclaims.controls.writing import write_first
from jobclaims.jobs import discovery
from jobclaims.jobs.schedules import JobSchedule
from jobclaims.models import JobPause, JobRun, JobTag, ScheduledJob, SchedulerSeen
from jobclaims.monitoring.health import Health, JobHealth, read_health
from jobclaims.scheduling import launch
from jobclaims.time import durations
from jobclaims.time.clock import database_now

#: How many fires to come the page shows per schedule.
NEXT_FIRES = 5
#: How many of the latest finished runs the duration chart draws.
CHARTED_RUNS = 20
#: The chart's size in CSS pixels: a bar and a gap per run.
_BAR, _GAP, _HEIGHT = 6, 2, 24
#: The statuses a Cancel ends (``JobRunQuerySet.cancel``).
_CANCELLABLE = (JobRun.Status.RUNNING, JobRun.Status.RETRYING)


def page_schedules() -> tuple[list[JobSchedule], dict[str, str]]:
    """The schedules the page lists, and by command what keeps each other
    scheduled job from having one (naming the fix)."""
    return discovery.every_schedule()


def time_zone_of(schedule: JobSchedule) -> str:
    """The time zone ``schedule``'s fires are read in: its own ``time_zone``, else ``TIME_ZONE``."""
    return schedule.time_zone


@dataclass(frozen=True)
class Fire:
    """A fire to come, as the page shows it: in its schedule's time zone,
    which the row names once."""

    at: datetime.datetime
    #: "in 4 min", by the database clock.
    relative: str
    #: Whether the schedule's fires fall on seconds other than :00.
    seconds: bool = False

    @property
    def shown(self) -> str:
        # Formatted here: a template's date filter would show the project's zone.
        return f"{self.at:%Y-%m-%d %H:%M:%S}" if self.seconds else f"{self.at:%Y-%m-%d %H:%M}"


@dataclass(frozen=True)
class Row:
    """One schedule on the page."""

    schedule: JobSchedule
    in_words: str
    time_zone: str
    next_fires: list[Fire]
    #: The job's newest claim, with ``state`` annotated.
    last_run: JobRun | None
    #: The latest finished runs, oldest first.
    finished: list[JobRun]
    pause: JobPause | None
    #: Keys of the fires of the look-back no instance claimed, oldest first.
    missed: list[str]
    #: What health says is wrong with the job, in a word or two each and in sentences.
    kinds: list[str]
    problems: list[str]
    #: The live schedulers that run the job.
    schedulers: list[SchedulerSeen]
    #: The runs a Cancel would end.
    cancellable: list[JobRun]
    #: The last run's state badge, as the claims' list draws it.
    last_badge: SafeString | str = ""
    #: When the pause was given, and when it ends, by the database clock: "2 h ago".
    paused_at: str = ""
    paused_until: str = ""

    @property
    def chart(self) -> SafeString:
        return sparkline(self.finished)

    @property
    def usual(self) -> str:
        """The median and the longest of the charted durations, in words."""
        spans = [run_duration(run) for run in self.finished]
        if not spans:
            return ""
        median = datetime.timedelta(seconds=statistics.median(s.total_seconds() for s in spans))
        return str(
            _("median %(median)s, longest %(longest)s")
            % {
                "median": durations.short(median, parts=2),
                "longest": durations.short(max(spans), parts=2),
            }
        )


def run_duration(run: JobRun) -> datetime.timedelta:
    assert run.finished_at is not None, "only a finished run has a duration"
    return run.finished_at - run.claimed_at


def sparkline(runs: list[JobRun]) -> SafeString:
    """``runs``' durations as bars in an inline SVG, tallest the longest;
    each bar is titled with its window, duration and status, and a run that
    did not succeed has a bar of its own colour and pattern."""
    if not runs:
        return format_html("{}", _("no finished run yet"))
    longest = max(run_duration(run).total_seconds() for run in runs) or 1.0
    bars = format_html_join(
        "",
        '<rect class="jobclaims-bar jobclaims-bar--{}" x="{}" y="{}" width="{}" height="{}">'
        "<title>{}: {}, {}</title></rect>",
        (
            (
                run.status,
                index * (_BAR + _GAP),
                _HEIGHT - height,
                _BAR,
                height,
                run.window,
                durations.short(run_duration(run), parts=2),
                JobRun.Status(run.status).label,
            )
            for index, run in enumerate(runs)
            for height in [max(2, round(_HEIGHT * run_duration(run).total_seconds() / longest))]
        ),
    )
    width = len(runs) * (_BAR + _GAP) - _GAP
    return format_html(
        '<svg class="jobclaims-sparkline" width="{}" height="{}" viewBox="0 0 {} {}" '
        'role="img" aria-label="{}">{}</svg>',
        width,
        _HEIGHT,
        width,
        _HEIGHT,
        _("durations of the last %(count)d finished runs") % {"count": len(runs)},
        bars,
    )


def rows(now: datetime.datetime, schedules: Sequence[JobSchedule]) -> tuple[list[Row], Health]:
    """The rows of ``schedules`` at ``now``, and the health they were read from.

    The same few reads whatever the number of rows: health once for every
    job, and each of the rows' runs and pauses in one query for them all.
    """
    health = read_health()
    by_job = {each.job: each for each in health.jobs}
    names = [each.job for each in schedules]
    reads = _Reads(names)
    listed = [
        _row(each, now, by_job.get(each.job), health.live_schedulers, reads) for each in schedules
    ]
    return listed, health


def last_stopped(health: Health, now: datetime.datetime) -> SchedulerSeen | None:
    """The scheduler that stopped cleanly last, within ``SCHEDULER_GRACE``:
    between a crontab's ``--once`` runs, or while a host restarts its
    scheduler, none is live, and its jobs still have it (health says so)."""
    oldest = now - jobclaims_settings.scheduler_grace
    stopped = [
        row
        for row in health.gone_schedulers
        if row.stopped_at is not None and row.last_seen_at >= oldest
    ]
    return max(stopped, key=lambda row: row.last_seen_at, default=None)


class _Reads:
    """The runs and pauses of the page's jobs, each kind read once for them all."""

    def __init__(self, jobs: list[str]):
        runs = JobRun.objects.filter(job__in=jobs)
        newest = JobRun.objects.filter(job=OuterRef("job")).order_by("-claimed_at", "-pk")
        self.last = {run.job: run for run in runs.with_state().filter(pk=newest.values("pk")[:1])}
        self.finished: dict[str, list[JobRun]] = {job: [] for job in jobs}
        latest_first = Window(
            RowNumber(), partition_by=F("job"), order_by=[F("claimed_at").desc(), F("pk").desc()]
        )
        charted = (
            runs.filter(finished_at__isnull=False)
            .annotate(rank=latest_first)
            .filter(rank__lte=CHARTED_RUNS)
            .order_by("job", "claimed_at", "pk")
        )
        for run in charted:
            self.finished[run.job].append(run)
        self.cancellable: dict[str, list[JobRun]] = {job: [] for job in jobs}
        for run in runs.filter(status__in=_CANCELLABLE).order_by("claimed_at", "pk"):
            self.cancellable[run.job].append(run)
        # A pause of a job holds for each of its schedules (jobclaims.claims.naming),
        # and a pause of a tag for each job that has it.
        parents = {job: naming.parent(job) or job for job in jobs}
        holding = {job: {job, parent} for job, parent in parents.items()}
        for tagged, tag in JobTag.objects.filter(job__in=set(parents.values())).values_list(
            "job", "tag"
        ):
            for job, parent in parents.items():
                if parent == tagged:
                    holding[job].add(tag)
        self.pauses: dict[str, JobPause] = {}
        names = set().union(*holding.values())
        for pause in JobPause.objects.in_force().filter(job__in=names).order_by("paused_at", "pk"):
            for job, held_by in holding.items():  # The newest wins.
                if pause.job in held_by:
                    self.pauses[job] = pause


def _all_paused(now: datetime.datetime) -> dict[str, Any]:
    """The page's banner of the pause of all jobs, if one is in force: it
    holds every row's job, whatever the row's own pause."""
    pause = pauses.in_force(pauses.ALL_JOBS)
    if pause is None:
        return {"all_paused": None}
    return {
        "all_paused": pause,
        "all_paused_at": durations.relative(pause.paused_at, now),
        "all_paused_until": durations.relative(pause.until, now) if pause.until else "",
    }


def _row(
    schedule: JobSchedule,
    now: datetime.datetime,
    health: JobHealth | None,
    live: list[SchedulerSeen],
    reads: _Reads,
) -> Row:
    zone = zoneinfo.ZoneInfo(time_zone_of(schedule))
    fires = schedule.next_fires(now, NEXT_FIRES)
    seconds = any(fire.second for fire in fires)
    pause = reads.pauses.get(schedule.job)
    return Row(
        schedule=schedule,
        in_words=schedule.cron.describe(),
        time_zone=time_zone_of(schedule),
        next_fires=[
            Fire(fire.astimezone(zone), durations.relative(fire, now), seconds) for fire in fires
        ],
        last_run=reads.last.get(schedule.job),
        finished=reads.finished[schedule.job],
        pause=pause,
        paused_at=durations.relative(pause.paused_at, now) if pause else "",
        paused_until=durations.relative(pause.until, now) if pause and pause.until else "",
        missed=health.missed if health is not None else [],
        kinds=health.kinds if health is not None else [],
        problems=health.problems if health is not None else [],
        schedulers=[row for row in live if schedule.job in row.schedules],
        cancellable=reads.cancellable[schedule.job],
    )


@admin.register(ScheduledJob)
class ScheduledJobAdmin(admin.ModelAdmin):
    """The schedules page, in the place of the proxy's change list."""

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("jobclaims/admin.css",)}

    #: Schedules per page: each row reads nothing of its own, but draws a
    #: chart and five fires.
    list_per_page = 50

    # Who may see the page and press which button is decided by the admins
    # of the claims and of the pauses, so that the page grants nothing more.
    # They are typed loosely: jobclaims.admin.runs, which defines them, imports this module.

    def _runs_admin(self) -> Any:
        return self.admin_site.get_model_admin(JobRun)

    def _pauses_admin(self) -> Any:
        return self.admin_site.get_model_admin(JobPause)

    def get_urls(self) -> list[URLPattern]:
        """The page alone: the proxy's rows are the claims, shown in their own admin."""
        page = self.admin_site.admin_view(self.changelist_view)
        return [path("", page, name=f"{self.opts.app_label}_{self.opts.model_name}_changelist")]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(self._runs_admin().has_view_or_change_permission(request))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def may_pause(self, request: HttpRequest) -> bool:
        """Who may pause a job, and resume it, in the pauses' admin."""
        return bool(self._pauses_admin().has_add_permission(request))

    def may_run(self, request: HttpRequest) -> bool:
        """Who may run the claims' actions (cancel among them) in their admin."""
        return bool(self._runs_admin().has_change_permission(request))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._act(request)
        now = database_now(jobclaims_settings.claims_database(JobRun))
        schedules, unusable = page_schedules()
        page = Paginator(schedules, self.list_per_page).get_page(request.GET.get(PAGE_VAR))
        listed, health = rows(now, list(page.object_list))
        badge = self._runs_admin().state_badge
        listed = [
            replace(row, last_badge=badge(row.last_run)) if row.last_run else row for row in listed
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Schedules"),
            "rows": listed,
            "page": page,
            "page_range": page.paginator.get_elided_page_range(page.number),
            "page_var": PAGE_VAR,
            "reason_length": pauses.REASON_LENGTH,
            **_all_paused(now),
            "unusable": sorted(unusable.items()),
            "live_schedulers": health.live_schedulers,
            "last_stopped": None if health.live_schedulers else last_stopped(health, now),
            "may_pause": self.may_pause(request),
            "may_run": self.may_run(request),
            "runs_url": reverse(f"{self.admin_site.name}:jobclaims_jobrun_changelist"),
            "pause_url": reverse(f"{self.admin_site.name}:jobclaims_jobpause_add"),
            "media": self.media,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/jobclaims/schedules.html", context)

    def _act(self, request: HttpRequest) -> HttpResponse:
        """Do what the pressed button says to the job the form names."""
        actions = {
            "pause": (self.may_pause, self._pause),
            "resume": (self.may_pause, self._resume),
            "run": (self.may_run, self._run_now),
            "cancel": (self.may_run, self._cancel),
        }
        action = actions.get(request.POST.get("action", ""))
        if action is None:
            return HttpResponse(status=400)
        allowed, act = action
        if not allowed(request):
            raise PermissionDenied
        name = request.POST.get("job", "")
        schedule = next((each for each in page_schedules()[0] if each.job == name), None)
        if schedule is None:
            raise Http404(f"no scheduled job is named {name!r}")
        act(request, schedule)
        return HttpResponseRedirect(request.path)

    def _pause(self, request: HttpRequest, schedule: JobSchedule) -> None:
        reason = request.POST.get("reason", "").strip()
        try:
            paused = pauses.pause(schedule.job, by=request.user.get_username(), reason=reason)
        except ValueError as error:  # A reason longer than a pause keeps: nothing is cut.
            self.message_user(request, f"Did not pause {schedule.job}: {error}.", messages.ERROR)
            return
        self._log(request, [paused], ADDITION, "Paused the job from the schedules page.")
        self.message_user(
            request,
            _("Paused %(job)s: every way it starts is refused until it is resumed.")
            % {"job": schedule.job},
            messages.SUCCESS,
        )

    def _resume(self, request: HttpRequest, schedule: JobSchedule) -> None:
        db = jobclaims_settings.claims_database(JobRun)
        # Locked from the read to the write: the log names the pauses ended.
        with write_first(db):
            ended = list(
                JobPause.objects.db_manager(db)
                .in_force()
                .filter(job=schedule.job)
                .select_for_update()
            )
            pauses.resume(schedule.job, by=request.user.get_username())
        if not ended:
            self.message_user(
                request,
                _("%(job)s was not paused: nothing changed.") % {"job": schedule.job},
                messages.WARNING,
            )
            return
        self._log(request, ended, CHANGE, "Resumed the job from the schedules page.")
        if pauses.in_force(pauses.ALL_JOBS) is not None:
            self.message_user(
                request,
                _(
                    "Resumed %(job)s, but all jobs are still paused: no fire of it starts "
                    "until they are resumed."
                )
                % {"job": schedule.job},
                messages.WARNING,
            )
            return
        self.message_user(
            request,
            _("Resumed %(job)s: its next fire starts as usual.") % {"job": schedule.job},
            messages.SUCCESS,
        )

    def _enqueue_now(self, request: HttpRequest, schedule: JobSchedule, claimed: JobRun) -> None:
        """Run a task schedule now: its task is enqueued under the claim, as a fire's is."""
        assert schedule.task is not None, "only a task schedule is enqueued"
        try:
            schedule.task.enqueue(schedule, claimed)
        except Exception as error:  # The queue's own errors, whatever its kind.
            claimed.release(JobRun.Status.FAILED, error=f"Could not enqueue the task: {error}")
            self.message_user(
                request,
                _("Could not enqueue %(run)s: %(error)s; its claim is recorded failed.")
                % {"run": claimed, "error": error},
                messages.ERROR,
            )
            return
        claimed.renew(jobclaims_settings.queue_lease)
        self._log(request, [claimed], ADDITION, "Ran the job now from the schedules page.")
        self.message_user(
            request,
            _("Enqueued %(job)s %(window)s: its outcome shows here when a worker ran it.")
            % {"job": claimed.job, "window": claimed.window},
            messages.SUCCESS,
        )

    def _run_now(self, request: HttpRequest, schedule: JobSchedule) -> None:
        # By its claim name: one of a job's several schedules is a target of its own.
        job = backfills.target(schedule.job)
        claimed = backfills.claim(job, backfills.current_key(job))
        if isinstance(claimed, Refusal):
            self.message_user(
                request,
                _("Did not run %(job)s %(window)s: %(why)s.")
                % {"job": claimed.job, "window": claimed.window, "why": claimed},
                messages.WARNING,
            )
            return
        if schedule.task is not None:
            self._enqueue_now(request, schedule, claimed)
            return
        try:
            process = launch.start_detached(schedule, claimed)
        except OSError as error:
            claimed.release(
                JobRun.Status.FAILED, error=f"Could not start the job's process: {error}"
            )
            self.message_user(
                request,
                _("Could not start %(run)s: %(error)s; its claim is recorded failed.")
                % {"run": claimed, "error": error},
                messages.ERROR,
            )
            return
        self._log(request, [claimed], ADDITION, "Ran the job now from the schedules page.")
        self.message_user(
            request,
            _("Started %(job)s %(window)s (pid %(pid)d): its outcome shows here when it ends.")
            % {"job": claimed.job, "window": claimed.window, "pid": process.pid},
            messages.SUCCESS,
        )

    def _cancel(self, request: HttpRequest, schedule: JobSchedule) -> None:
        by = request.user.get_username()
        # The claims' admin locks the rows it cancels, so that its log names them.
        cancelled = self._runs_admin()._change_logged(
            request,
            JobRun.objects.filter(job=schedule.job, status__in=_CANCELLABLE),
            lambda runs: runs.cancel(by),
            "Cancelled the run from the schedules page: its process is told, "
            "its writes are refused.",
        )
        if not cancelled:
            self.message_user(
                request,
                _("No run of %(job)s is running: nothing was cancelled.") % {"job": schedule.job},
                messages.WARNING,
            )
            return
        self.message_user(
            request,
            ngettext(
                "Cancelled %(count)d run of %(job)s: its process is told and stops.",
                "Cancelled %(count)d runs of %(job)s: each one's process is told and stops.",
                cancelled,
            )
            % {"count": cancelled, "job": schedule.job},
            messages.SUCCESS,
        )

    def _log(self, request: HttpRequest, changed: list[Any], flag: int, message: str) -> None:
        # The admin serves only a signed-in staff user.
        assert request.user.pk is not None
        LogEntry.objects.log_actions(
            user_id=request.user.pk, queryset=changed, action_flag=flag, change_message=message
        )
