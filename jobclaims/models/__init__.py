"""jobclaims' models: the claim a run holds on its window, and the rows around it.

- ``runs``: ``JobRun``, the claim, and its manager's ``claim()`` façade;
  how a claim is decided lives in ``jobclaims.claims``.
- ``run_queries``: claims selected by state, and operators' actions on them.
- ``skips``: the instances that stepped aside, counted by reason.
- ``controls``: operators' orders, pauses and retired jobs, and the tags
  a pause of many jobs holds by.
- ``deploys``: what the deploys ran: schedulers seen, schedule versions,
  the commands known.
- ``stored_schedules``: the schedules operators add at runtime, and the
  count of their changes that the schedulers poll.
"""

from typing import TYPE_CHECKING

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

# Said before the models are defined, in place of Django's error about a
# model outside INSTALLED_APPS: a job's command imports them first, and
# the checks that would name the fix are this app's own.
if apps.apps_ready and not apps.is_installed("jobclaims"):
    raise ImproperlyConfigured(
        'jobclaims is not in INSTALLED_APPS: add "jobclaims" to INSTALLED_APPS in your '
        "settings, then run: manage.py migrate jobclaims"
    )

from jobclaims.models.controls import (
    JobPause,
    JobPauseManager,
    JobPauseQuerySet,
    JobTag,
    RetiredJob,
)
from jobclaims.models.deploys import KnownCommand, SchedulerSeen, ScheduleVersion
from jobclaims.models.managers import ClaimsDatabaseManager
from jobclaims.models.run_queries import JobRunQuerySet, Listing, Skips, StateAnnotations
from jobclaims.models.runs import JobRun, JobRunManager, ScheduledJob
from jobclaims.models.skips import JobSkip
from jobclaims.models.stored_schedules import StoredSchedule, StoredSchedulesGeneration

if TYPE_CHECKING:
    from jobclaims.models.run_queries import ListedRun as ListedRun

__all__ = [
    "ClaimsDatabaseManager",
    "JobPause",
    "JobPauseManager",
    "JobPauseQuerySet",
    "JobRun",
    "JobRunManager",
    "JobRunQuerySet",
    "JobSkip",
    "JobTag",
    "KnownCommand",
    "Listing",
    "RetiredJob",
    "ScheduleVersion",
    "ScheduledJob",
    "SchedulerSeen",
    "Skips",
    "StateAnnotations",
    "StoredSchedule",
    "StoredSchedulesGeneration",
]
