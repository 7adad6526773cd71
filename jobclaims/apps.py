from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class JobClaimsConfig(AppConfig):
    name = "jobclaims"
    verbose_name = _("Job claims")
    default_auto_field = "django.db.models.BigAutoField"
