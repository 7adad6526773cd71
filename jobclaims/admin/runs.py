"""The claims' admin: an audit view of claims, with two ways to unstick a job.

Claims are written by jobs, never by hand: the detail page is read-only,
nothing can be added or deleted, and the actions go through the queryset's
own state changes. The change permission is what lets a user run the actions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.admin.utils import display_for_value, flatten_fieldsets
from django.contrib.admin.views.main import ChangeList
from django.db import connections
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from jobclaims.claims.rule import MEANINGS, State
from jobclaims.conf import jobclaims_settings
from jobclaims.controls.retiring import retire
from jobclaims.controls.writing import write_first
from jobclaims.jobs.discovery import schedule_of
from jobclaims.models import JobRun, JobRunQuerySet, RetiredJob, SchedulerSeen
from jobclaims.monitoring.health import checked_overview, gone_jobs, missed_windows
from jobclaims.monitoring.overview import describe
from jobclaims.time import clock, durations
from jobclaims.time.clock import database_now

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldOpts
    from django.utils.functional import _StrOrPromise

    from jobclaims.models import ListedRun

# A shape per state, so that the badges differ by more than colour.
_SYMBOLS = {
    State.ACTIVE: "\u25cf",  # ● a steady light: held
    State.EXPIRED: "\u26a0",  # ⚠ needs a look: the holder died
    State.SUCCEEDED: "\u2713",  # ✓
    State.FAILED: "\u2715",  # ✕
    State.RETRYING: "\u21bb",  # ↻ comes round again
    State.TIMED_OUT: "\u25f7",  # ◷ a clock: out of time (in the fonts the admin falls back on)
    State.CANCELLED: "\u2298",  # ⊘ stopped by hand
}


class StateFilter(admin.SimpleListFilter):
    """Filter by state through the queryset's methods, which indexes serve."""

    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(State.choices)

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        if value is None or value not in State.values:
            return queryset
        return queryset.in_state(value)


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):
    # What tells a run from the others and how it stands comes first, so
    # that a laptop's screen shows it beside the sidebars; the rest follows.
    list_display = (
        "job",
        "window_key",
        "state_badge",
        "expires",
        "duration",
        "attempt",
        "skipped",
        "claimed_at",
        "owner",
    )
    list_display_links = ("job", "window_key")
    list_filter = (StateFilter, "job")
    search_fields = ("job", "window", "owner")
    date_hierarchy = "claimed_at"
    ordering = ("-claimed_at", "-pk")
    # A large table must not be counted twice per page, nor once per filter
    # choice: the filtered count is the only COUNT the page runs.
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ("expire_claims", "reopen_windows", "cancel_runs", "retire_jobs")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "job",
                    "window",
                    "state_badge",
                    "owner",
                    "attempt",
                    "failures",
                    "retry_at",
                    "skipped",
                    "cancelled_by",
                    "cancelled_at",
                )
            },
        ),
        (
            _("Times"),
            {
                "fields": (
                    "claimed_at",
                    "expires_at",
                    "expires",
                    "finished_at",
                    "duration",
                    "last_skipped",
                )
            },
        ),
        (_("Claim"), {"fields": ("schedule", "overlap", "token", "holds_job")}),
    )
    #: Shown only for a run that has an error: a failed or reopened one.
    error_fieldset: ClassVar[tuple[_StrOrPromise, _FieldOpts]] = (
        _("Error"),
        {"fields": ("traceback",)},
    )
    #: Shown only for a run whose output was captured (a JobCommand's).
    output_fieldset: ClassVar[tuple[_StrOrPromise, _FieldOpts]] = (
        _("Output"),
        {"fields": ("printed",)},
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("jobclaims/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> JobRunQuerySet:
        # JobRun.objects reads the database the jobs claim on: a lagging
        # replica would show a finished run as active, and an operator could
        # expire the wrong one.
        runs = super().get_queryset(request)
        assert isinstance(runs, JobRunQuerySet), "JobRun.objects is the default manager"
        # A page of a hundred runs need not read each one's output; the
        # run's own page reads it when it shows it.
        return runs.with_skips().with_state().defer("output")

    @property
    def claims_database(self) -> str:
        return jobclaims_settings.claims_database(JobRun)

    def get_fieldsets(self, request: HttpRequest, obj: JobRun | None = None) -> Any:
        fieldsets: tuple[Any, ...] = self.fieldsets
        if obj is not None and obj.error:
            fieldsets = (*fieldsets, self.error_fieldset)
        if obj is not None and obj.output is not None:
            fieldsets = (*fieldsets, self.output_fieldset)
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: JobRun | None = None) -> Any:
        return flatten_fieldsets((*self.fieldsets, self.error_fieldset, self.output_fieldset))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: JobRun | None = None) -> bool:
        # No row is edited by hand, so every detail page is read-only; on the
        # list, the change permission decides who may run the actions.
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: JobRun | None = None) -> bool:
        # Deleting a held claim would let a second instance run beside the
        # first; old rows go with jobclaims_prune, which knows what to keep.
        return False

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        """The list, without its dates where the database cannot list them
        in the zone active for the request (an operator's, which a
        middleware activated), saying why, rather than fail: check W002
        judges ``TIME_ZONE`` alone. A date picked before still filters,
        by a range of moments that needs no conversion."""
        changelist = super().get_changelist_instance(request)
        alias = jobclaims_settings.claims_database(JobRun)
        zone = timezone.get_current_timezone_name()
        if changelist.date_hierarchy and not clock.dates_in(connections[alias], zone):
            changelist.date_hierarchy = None
            self.message_user(
                request,
                _(
                    "Claims are not grouped by date: the %(alias)s database cannot convert "
                    "times to %(zone)s without its time-zone tables (see check jobclaims.W002)."
                )
                % {"alias": alias, "zone": zone},
                messages.WARNING,
            )
        return changelist

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        # Counted after Django has checked the permission (a user without it
        # got a 403 from super() and costs no query), and only for a page
        # still to be rendered: an action or a bad filter answers a redirect.
        page = getattr(response, "context_data", None)
        if page is None:
            return response
        given = extra_context or {}
        summary: dict[str, Any] = {
            "claim_counts": JobRun.objects.running_counts(),
            # Not watched, so said here: an operator retires them, or the code has them again.
            "gone_jobs": gone_jobs(),
        }
        if job := request.GET.get("job__exact"):
            # Listed for one job at a time: each job's schedule is its own.
            summary["missed_job"], summary["missed_windows"] = job, missed_windows(job)
            if (scheduled := schedule_of(job)) is not None:
                now = database_now(jobclaims_settings.claims_database(JobRun))
                summary["job_schedule"] = describe(checked_overview(scheduled, now))
        page.update({key: value for key, value in summary.items() if key not in given})
        return response

    @admin.display(description=_("state"))
    def state_badge(self, run: ListedRun) -> SafeString:
        state = State(run.state)
        return format_html(
            '<span class="jobclaims-state jobclaims-state--{}" title="{}">'
            '<span aria-hidden="true">{}</span> {}</span>',
            state.value,
            MEANINGS[state],
            _SYMBOLS[state],
            state.label,
        )

    @admin.display(description=_("window"), ordering="window")
    def window_key(self, run: JobRun) -> SafeString:
        """The window's key, which may break after its date, and only there."""
        day, t, time = run.window.partition("T")
        if not t:
            return format_html('<span class="jobclaims-nobreak">{}</span>', run.window)
        return format_html(
            '<span class="jobclaims-nobreak">{}</span><wbr>'
            '<span class="jobclaims-nobreak">T{}</span>',
            day,
            time,
        )

    @admin.display(description=_("expires"), ordering="expires_at")
    def expires(self, run: ListedRun) -> str:
        """When the lease ends or ended, by the database's clock; running only."""
        if run.status != JobRun.Status.RUNNING:
            return self.get_empty_value_display()
        return durations.relative(run.expires_at, run.db_now)

    @admin.display(description=_("duration"))
    def duration(self, run: JobRun) -> str:
        if run.finished_at is None:
            return self.get_empty_value_display()
        return durations.short(run.finished_at - run.claimed_at, parts=2)

    @admin.display(description=_("skipped"))
    def skipped(self, run: ListedRun) -> int:
        """How many instances stepped aside for this run since it claimed."""
        return run.skips

    @admin.display(description=_("last skipped at"))
    def last_skipped(self, run: ListedRun) -> str:
        return display_for_value(run.last_skipped_at, self.get_empty_value_display())

    @admin.display(description=_("traceback"))
    def traceback(self, run: JobRun) -> SafeString:
        return format_html('<pre class="jobclaims-traceback">{}</pre>', run.error)

    @admin.display(description=_("output"))
    def printed(self, run: JobRun) -> SafeString:
        """What the run printed, escaped: a job's output is text, never markup."""
        if not run.output:
            return format_html("<p>{}</p>", _("The run printed nothing."))
        return format_html('<pre class="jobclaims-output">{}</pre>', run.output)

    @admin.action(permissions=["change"], description=_("Expire selected claims now"))
    def expire_claims(self, request: HttpRequest, queryset: JobRunQuerySet) -> None:
        expired = self._change_logged(
            request,
            queryset.active(),
            JobRunQuerySet.expire,
            "Expired the lease by hand, for the next run to take over.",
        )
        if not expired:
            self.message_user(
                request,
                _("None of the selected claims is active: nothing was expired."),
                messages.WARNING,
            )
            return
        self.message_user(
            request,
            ngettext(
                "Expired %(count)d claim: the next run of its job takes it over.",
                "Expired %(count)d claims: the next run of each job takes them over.",
                expired,
            )
            % {"count": expired},
            messages.SUCCESS,
        )

    @admin.action(permissions=["change"], description=_("Reopen selected windows"))
    def reopen_windows(self, request: HttpRequest, queryset: JobRunQuerySet) -> None:
        reopened = self._change_logged(
            request,
            queryset.filter(status=JobRun.Status.SUCCEEDED),
            JobRunQuerySet.reopen,
            "Reopened the window by hand, for the next run to take over.",
        )
        if not reopened:
            self.message_user(
                request,
                _(
                    "None of the selected windows succeeded: failed and expired "
                    "ones are open already, active ones need expiring first."
                ),
                messages.WARNING,
            )
            return
        self.message_user(
            request,
            ngettext(
                "Reopened %(count)d window: the next run of its job runs it again.",
                "Reopened %(count)d windows: the next run of each job runs them again.",
                reopened,
            )
            % {"count": reopened},
            messages.SUCCESS,
        )

    @admin.action(permissions=["change"], description=_("Cancel selected running runs"))
    def cancel_runs(self, request: HttpRequest, queryset: JobRunQuerySet) -> None:
        """Cancel the selected runs, as ``jobclaims_cancel`` does, in the
        admin user's name, and record who did in the admin's history."""
        by = request.user.get_username()
        cancelled = self._change_logged(
            request,
            queryset.filter(status__in=[JobRun.Status.RUNNING, JobRun.Status.RETRYING]),
            lambda runs: runs.cancel(by),
            "Cancelled the run by hand: its process is told, its writes are refused.",
        )
        if not cancelled:
            self.message_user(
                request,
                _("None of the selected runs is running: nothing was cancelled."),
                messages.WARNING,
            )
            return
        self.message_user(
            request,
            ngettext(
                "Cancelled %(count)d run: its process is told and stops.",
                "Cancelled %(count)d runs: each one's process is told and stops.",
                cancelled,
            )
            % {"count": cancelled},
            messages.SUCCESS,
        )

    @admin.action(permissions=["change"], description=_("Retire the selected claims' jobs"))
    def retire_jobs(self, request: HttpRequest, queryset: JobRunQuerySet) -> None:
        """Retire each job of the selected claims, as ``jobclaims_retire`` does,
        and record who did in the admin's history."""
        jobs = sorted(set(queryset.values_list("job", flat=True)))
        retired = [retire(job, request.user.get_username()) for job in jobs]
        assert request.user.pk is not None  # Only a signed-in staff user runs an action.
        LogEntry.objects.log_actions(
            user_id=request.user.pk,
            queryset=RetiredJob.objects.filter(pk__in=[row.pk for row in retired]),
            action_flag=ADDITION,
            change_message="Retired the job by hand: health no longer watches it.",
        )
        self.message_user(
            request,
            ngettext(
                "Retired %(count)d job: health no longer watches it, until it is claimed again.",
                "Retired %(count)d jobs: health no longer watches them, until claimed again.",
                len(retired),
            )
            % {"count": len(retired)},
            messages.SUCCESS,
        )

    def _change_logged(
        self,
        request: HttpRequest,
        targets: JobRunQuerySet,
        change: Callable[[JobRunQuerySet], int],
        message: str,
    ) -> int:
        """Apply ``change`` to ``targets`` and record who changed which claims.

        The rows stay locked from the read to the write, so the history names
        exactly the claims that changed even while their jobs finish. The lock
        is held for two statements: a job that claims meanwhile skips them.
        """
        db = self.claims_database
        with write_first(db):
            rows = list(targets.order_by("pk").select_for_update())
            locked = JobRun.objects.filter(pk__in=[row.pk for row in rows])
            changed = change(locked)
        # The admin lets only a signed-in staff user run an action.
        assert request.user.pk is not None
        LogEntry.objects.log_actions(
            user_id=request.user.pk,
            queryset=rows,
            action_flag=CHANGE,
            change_message=message,
        )
        return changed


@admin.register(SchedulerSeen)
class SchedulerSeenAdmin(admin.ModelAdmin):
    """The schedulers seen, live or gone, and the schedules each runs: read-only."""

    list_display = (
        "host",
        "pid",
        "live",
        "started_at",
        "last_seen_at",
        "stopped_at",
        "fingerprint",
        "jobs",
    )
    list_filter = ("host",)
    ordering = ("-last_seen_at",)
    readonly_fields = (
        "host",
        "pid",
        "fingerprint",
        "schedules",
        "started_at",
        "last_seen_at",
        "stopped_at",
    )

    @admin.display(boolean=True, description=_("live"))
    def live(self, row: SchedulerSeen) -> bool:
        return row.live_at(database_now(jobclaims_settings.claims_database(SchedulerSeen)))

    @admin.display(description=_("jobs"))
    def jobs(self, row: SchedulerSeen) -> str:
        return ", ".join(f"{job} ({schedule})" for job, schedule in sorted(row.schedules.items()))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: SchedulerSeen | None = None) -> bool:
        # Written by the schedulers alone: the list and the detail are for reading.
        return False
