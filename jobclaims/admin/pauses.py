"""The admin's pauses: pause a job by adding a pause, resume it by an action.

Each pause is kept, resumed or not, as the job's pause history; the admin
log names the admin user who paused or resumed it. The add permission on
job pauses lets a user do both. Imported by ``jobclaims.admin.runs``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from jobclaims.admin.base import WritesFirstAdmin
from jobclaims.conf import jobclaims_settings
from jobclaims.controls import pauses
from jobclaims.exceptions import UnknownJob
from jobclaims.jobs.discovery import require_known
from jobclaims.models import JobPause, JobRun
from jobclaims.time.clock import DatabaseNow, database_now


class PauseForm(forms.ModelForm):
    """A new pause: the job must be one jobclaims knows, or ``*`` for all
    jobs (``pauses.ALL_JOBS``); ``until`` still to come."""

    class Meta:
        model = JobPause
        fields = ("job", "reason", "until")
        widgets = {"reason": forms.Textarea(attrs={"maxlength": pauses.REASON_LENGTH})}
        help_texts = {"job": _("The job's name, or * to pause all jobs.")}

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # Django reads and shows a form's times in the zone active for the
        # request: TIME_ZONE, or the operator's where a middleware activates
        # one. jobclaims_pause --until reads TIME_ZONE, so say which it is.
        # A kept pause's page shows its fields read-only, outside the form.
        if "until" in self.fields:
            self.fields["until"].help_text = _(
                "The pause ends by itself at this time, read in %(zone)s; empty: until resumed."
            ) % {"zone": timezone.get_current_timezone_name()}

    def clean_reason(self) -> str:
        reason: str = self.cleaned_data["reason"]
        if problem := pauses.reason_problem(reason):
            raise forms.ValidationError(problem[:1].upper() + problem[1:] + ".")
        return reason

    def clean_job(self) -> str:
        job: str = self.cleaned_data["job"]
        try:
            if job != pauses.ALL_JOBS:
                require_known(job)
        except UnknownJob as error:
            raise forms.ValidationError(str(error)) from error
        return job

    def clean_until(self) -> Any:
        until = self.cleaned_data["until"]
        now = database_now(jobclaims_settings.claims_database(JobRun))
        if until is not None and until <= now:
            raise forms.ValidationError(
                _("This time has passed already; give one still to come, or leave it empty.")
            )
        return until


@admin.register(JobPause)
class JobPauseAdmin(WritesFirstAdmin):
    form = PauseForm
    list_display = (
        "paused_job",
        "in_force",
        "paused_by",
        "paused_at",
        "until",
        "reason",
        "resumed_by",
        "resumed_at",
    )
    list_filter = ("job",)
    search_fields = ("job", "reason")
    actions = ("resume_jobs",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobPause]:
        # The database's clock judges each pause's until, as claims do.
        pauses: QuerySet[JobPause] = super().get_queryset(request)
        return pauses.annotate(db_now=DatabaseNow())

    def has_change_permission(self, request: HttpRequest, obj: JobPause | None = None) -> bool:
        # A pause is history once given: it ends by resuming the job.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: JobPause | None = None) -> bool:
        return False

    def has_resume_permission(self, request: HttpRequest) -> bool:
        """Who may pause a job may resume it."""
        return self.has_add_permission(request)

    def save_model(self, request: HttpRequest, obj: JobPause, form: Any, change: bool) -> None:
        """Pause through ``jobclaims.controls.pauses``, which ends the pause it replaces."""
        paused = pauses.pause(
            obj.job, by=request.user.get_username(), reason=obj.reason, until=obj.until
        )
        obj.pk, obj.paused_by, obj.paused_at = paused.pk, paused.paused_by, paused.paused_at

    @admin.display(ordering="job", description=_("job"))
    def paused_job(self, pause: JobPause) -> str:
        return str(_("all jobs")) if pause.job == pauses.ALL_JOBS else pause.job

    @admin.display(boolean=True, description=_("in force"))
    def in_force(self, pause: JobPause) -> bool:
        ends = pause.until
        return pause.resumed_at is None and (ends is None or ends > pause.db_now)  # type: ignore[attr-defined]

    @admin.action(permissions=["resume"], description=_("Resume the selected pauses' jobs"))
    def resume_jobs(self, request: HttpRequest, queryset: QuerySet[JobPause]) -> None:
        jobs = sorted(set(queryset.values_list("job", flat=True)))
        resumed = [job for job in jobs if pauses.resume(job, by=request.user.get_username())]
        if not resumed:
            self.message_user(
                request, _("None of those jobs was paused: nothing changed."), messages.WARNING
            )
            return
        # The admin lets only a signed-in staff user run an action.
        assert request.user.pk is not None
        LogEntry.objects.log_actions(
            user_id=request.user.pk,
            queryset=list(queryset.filter(job__in=resumed)),
            action_flag=CHANGE,
            change_message="Resumed the job.",
        )
        self.message_user(
            request,
            ngettext(
                "Resumed %(count)d job: its next run starts as usual.",
                "Resumed %(count)d jobs: their next runs start as usual.",
                len(resumed),
            )
            % {"count": len(resumed)},
            messages.SUCCESS,
        )
