"""What the admins whose forms write share: their writes come before their reads."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from jobclaims.conf import jobclaims_settings
from jobclaims.controls.writing import write_first


class WritesFirstAdmin(admin.ModelAdmin):
    """A form's submission, and a deletion, in a transaction that takes its
    write lock before the form is checked: on SQLite, a check's read before
    the write made the write fail at once with "database is locked" when a
    claim committed in between (``jobclaims.controls.writing``)."""

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method != "POST":
            return super().changeform_view(request, object_id, form_url, extra_context)
        with write_first(jobclaims_settings.claims_database(self.model)):
            return super().changeform_view(request, object_id, form_url, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method != "POST":
            return super().delete_view(request, object_id, extra_context)
        with write_first(jobclaims_settings.claims_database(self.model)):
            return super().delete_view(request, object_id, extra_context)
