"""Recording the ``JobCommand``s of the code at each ``migrate``, so that a
job removed from the code is known to be gone.

A job's claims do not say how it was run: through a ``JobCommand`` (from
the scheduler, cron or by hand), ``claim()``, ``@claimed`` or Celery. Only
the commands can be listed from the code, so health takes a job for gone
when some deploy's code had it as a command (a ``KnownCommand`` row, or a
schedule a scheduler recorded) and this code does not. Deploys run
``migrate``, as Django's content types rely on: each records its commands,
insert-if-absent, in the claims database.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps as global_apps
from django.apps.registry import Apps
from django.db import router

from jobclaims.conf import jobclaims_settings
from jobclaims.job_discovery import jobs_in_code
from jobclaims.models import KnownCommand


def record_commands(using: str, apps: Apps = global_apps, **kwargs: Any) -> None:
    """The ``post_migrate`` receiver: record this code's commands, if
    ``using`` is the claims database and its table is migrated.

    ``flush`` sends the signal too, without the migrations' ``apps``: the
    tables are all there then.
    """
    try:
        # The model as the migrations left it: absent when migrated back
        # before the table, as content types do it.
        model = apps.get_model("jobclaims", "KnownCommand")
    except LookupError:
        return
    if using != jobclaims_settings.claims_database(KnownCommand):
        return
    if not router.allow_migrate_model(using, model):
        return
    model.objects.using(using).bulk_create(
        [model(job=job) for job in sorted(jobs_in_code())], ignore_conflicts=True
    )
