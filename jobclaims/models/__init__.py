"""jobclaims' models: the claim a run holds on its window, and the rows around it.

- ``runs``: ``JobRun``, the claim, and its manager's ``claim()`` façade;
  how a claim is decided lives in ``jobclaims.claims``.
- ``run_queries``: claims selected by state, and operators' actions on them.
- ``skips``: the instances that stepped aside, counted by reason.
- ``controls``: operators' orders, pauses and retired jobs.
- ``deploys``: what the deploys ran: schedulers seen, schedule versions,
  the commands known.
"""

from typing import TYPE_CHECKING

from jobclaims.models.controls import JobPause, JobPauseManager, JobPauseQuerySet, RetiredJob
from jobclaims.models.deploys import KnownCommand, SchedulerSeen, ScheduleVersion
from jobclaims.models.managers import ClaimsDatabaseManager
from jobclaims.models.run_queries import JobRunQuerySet, Listing, Skips, StateAnnotations
from jobclaims.models.runs import JobRun, JobRunManager, ScheduledJob
from jobclaims.models.skips import JobSkip

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
    "KnownCommand",
    "Listing",
    "RetiredJob",
    "ScheduleVersion",
    "ScheduledJob",
    "SchedulerSeen",
    "Skips",
    "StateAnnotations",
]
