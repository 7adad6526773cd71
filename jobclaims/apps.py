from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class JobClaimsConfig(AppConfig):
    name = "jobclaims"
    verbose_name = _("Job claims")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here: the checks import the models, which need the app
        # registry that is being populated while this module loads.
        from jobclaims.checks import register_checks
        from jobclaims.jobs.discovery import record_commands

        register_checks()
        post_migrate.connect(record_commands, sender=self)
