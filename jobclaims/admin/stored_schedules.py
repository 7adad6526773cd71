"""The admin's stored schedules: add, edit and delete a schedule without a deploy.

Every change goes through ``jobclaims.controls.schedule_edits``, as a
change from code does: checked as the scheduler would read it (the form
names the fix, and nothing is written), counted for the schedulers, which
run it from their next look, and signed with the admin user's name. The
form carries the version it was read at: of two operators who edit one
schedule at once, the second is told who changed it, and changes nothing.

Django's model permissions guard it: a user with the view permission sees
the schedules and their next fires, and no button; a POST without the
permission is refused with 403. The admin log records each change.
"""

from __future__ import annotations

import itertools
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from jobclaims.admin.base import WritesFirstAdmin
from jobclaims.controls import schedule_edits
from jobclaims.exceptions import EditConflict, UnknownJob
from jobclaims.jobs import discovery
from jobclaims.jobs.stored_schedules import job_of
from jobclaims.models import StoredSchedule
from jobclaims.time.clock import database_now

#: How many fires to come a schedule's page shows.
NEXT_FIRES = 5


class StoredScheduleForm(forms.ModelForm):
    """A schedule as the scheduler would read it; ``read_version``: the one
    the edit was read at, refused if another edit came since."""

    #: The version the form was read at (``version`` is shown, read-only).
    read_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = StoredSchedule
        fields = schedule_edits.EDITABLE

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["read_version"].initial = self.instance.version

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        if self.instance.pk is not None:
            self._refuse_a_stale_edit(cleaned.get("read_version"))
        edited = StoredSchedule(
            pk=self.instance.pk,
            **{field: cleaned.get(field) for field in schedule_edits.EDITABLE},
        )
        edited._state.adding = self.instance._state.adding  # Its own name is not taken.
        try:
            schedule_edits.check(edited)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from error
        return cleaned

    def _refuse_a_stale_edit(self, version: int | None) -> None:
        """Name who changed the schedule since this form was read, or that it went."""
        now = StoredSchedule.objects.filter(pk=self.instance.pk).values("version", "changed_by")
        found = now.first()
        if found is None:
            raise forms.ValidationError(_("This schedule was deleted meanwhile."))
        if version is not None and found["version"] != version:
            raise forms.ValidationError(
                _(
                    "%(who)s changed this schedule meanwhile (version %(now)d, not %(read)d): "
                    "read it again and redo the edit."
                )
                % {"who": found["changed_by"], "now": found["version"], "read": version}
            )


@admin.register(StoredSchedule)
class StoredScheduleAdmin(WritesFirstAdmin):
    form = StoredScheduleForm
    list_display = (
        "__str__",
        "expression",
        "time_zone",
        "arguments",
        "next_fire",
        "version",
        "changed_by",
        "changed_at",
    )
    list_filter = ("command",)
    search_fields = ("name", "command", "arguments")
    readonly_fields = (
        "next_fires",
        "version",
        "created_by",
        "created_at",
        "changed_by",
        "changed_at",
    )
    fieldsets = (
        (None, {"fields": ("name", "command", "arguments")}),
        (_("Or a task"), {"fields": ("task", "task_args", "task_kwargs")}),
        (_("When it fires"), {"fields": ("expression", "time_zone", "next_fires")}),
        (_("Bounds"), {"fields": ("start", "end", "skip_dates", "max_runs")}),
        (None, {"fields": ("overlap", "read_version")}),
        (
            _("History"),
            {"fields": ("version", "created_by", "created_at", "changed_by", "changed_at")},
        ),
    )

    add_fieldsets = (
        (None, {"fields": ("name", "command", "arguments")}),
        (_("Or a task"), {"fields": ("task", "task_args", "task_kwargs")}),
        (_("When it fires"), {"fields": ("expression", "time_zone")}),
        (_("Bounds"), {"fields": ("start", "end", "skip_dates", "max_runs")}),
        (None, {"fields": ("overlap",)}),
    )

    def get_fieldsets(self, request: HttpRequest, obj: StoredSchedule | None = None) -> Any:
        """A new schedule has no fires to preview, nor history, yet."""
        return self.add_fieldsets if obj is None else self.fieldsets

    def save_model(
        self, request: HttpRequest, obj: StoredSchedule, form: Any, change: bool
    ) -> None:
        """Through ``schedule_edits``: counted for the schedulers, and
        refused if another edit came since the form was read."""
        fields = {field: form.cleaned_data[field] for field in schedule_edits.EDITABLE}
        by = request.user.get_username()
        if not change:
            saved = schedule_edits.add_schedule(by=by, **fields)
        else:
            try:
                saved = schedule_edits.change_schedule(
                    StoredSchedule.objects.get(pk=obj.pk).name,
                    by=by,
                    version=form.cleaned_data["read_version"],
                    **fields,
                )
            except (EditConflict, UnknownJob) as error:  # Changed, or deleted, since clean().
                request._jobclaims_refused = str(error)  # type: ignore[attr-defined]
                return
        obj.pk, obj.version = saved.pk, saved.version

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        if getattr(request, "_jobclaims_refused", None):
            return None
        return super().log_change(request, obj, message)

    def response_change(self, request: HttpRequest, obj: StoredSchedule) -> HttpResponse:
        """Back to the form, with why, for an edit another one came before."""
        refused = getattr(request, "_jobclaims_refused", None)
        if refused:
            self.message_user(request, refused[:1].upper() + refused[1:] + ".", messages.ERROR)
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)

    def delete_model(self, request: HttpRequest, obj: StoredSchedule) -> None:
        schedule_edits.delete_schedule(obj.name, by=request.user.get_username())

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[StoredSchedule]) -> None:
        for name in queryset.values_list("name", flat=True):
            schedule_edits.delete_schedule(name, by=request.user.get_username())

    @admin.display(description=_("next fire"))
    def next_fire(self, stored: StoredSchedule) -> str:
        fires = self._fires(stored, 1)
        return fires[0] if fires else "—"

    @admin.display(description=_("next fires"))
    def next_fires(self, stored: StoredSchedule) -> SafeString | str:
        fires = self._fires(stored, NEXT_FIRES)
        if not fires:
            return "—"
        return format_html_join("", "<div>{}</div>", ((fire,) for fire in fires))

    def _fires(self, stored: StoredSchedule, count: int) -> list[str]:
        """Its next ``count`` fires, in its own zone, or why it does not run."""
        try:
            job = job_of(stored, discovery.job_commands(), discovery.usable_jobs()[0])
        except ValueError as error:
            return [str(error)]
        now = database_now(StoredSchedule.objects.claims_db())
        fires = itertools.islice(job.cron.fires_after(now), count)
        return [f"{job.cron.local(fire):%Y-%m-%d %H:%M:%S %Z}" for fire in fires]
