"""The four states an operator sees a claim in, judged by the database's clock.

The table stores a status (running, succeeded, failed); whether a running
claim is still held depends on the moment it is looked at. A host's clock may
disagree with the one the claim engine uses, so the state is computed in SQL
from ``DatabaseNow()``, never in Python from ``timezone.now()``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias, TypedDict

from django.db import models
from django.db.models import Case, Count, Q, Value, When
from django.utils.translation import gettext_lazy as _

from jobclaims.clock import DatabaseNow
from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun, JobRunQuerySet, Skips

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class State(models.TextChoices):
    ACTIVE = "active", _("active")
    EXPIRED = "expired", _("expired")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")


class StateAnnotations(TypedDict):
    """What ``with_state()`` annotates on each run."""

    state: str
    db_now: datetime.datetime


class Listing(StateAnnotations, Skips):
    """What a listing of claims shows beside the row: its state and its skips."""


if TYPE_CHECKING:
    #: A run as the admin and jobclaims_status list it.
    ListedRun: TypeAlias = WithAnnotations[JobRun, Listing]


#: What each state means, in words an operator reads next to its badge.
MEANINGS = {
    State.ACTIVE: _("Running; its holder's lease has not run out."),
    State.EXPIRED: _("Still marked running, but its lease ran out: its holder died."),
    State.SUCCEEDED: _("Finished and succeeded."),
    State.FAILED: _("Finished and failed; the next run takes this window over."),
}

# Each state selects its rows through the queryset's own filters, which the
# (status, expires_at) index serves, rather than by comparing the computed
# state: a filter on a CASE expression would read every row.
_FILTERS: dict[str, Callable[[JobRunQuerySet], JobRunQuerySet]] = {
    State.ACTIVE: JobRunQuerySet.active,
    State.EXPIRED: JobRunQuerySet.expired,
    State.SUCCEEDED: lambda runs: runs.filter(status=JobRun.Status.SUCCEEDED),
    State.FAILED: lambda runs: runs.filter(status=JobRun.Status.FAILED),
}


def in_state(runs: JobRunQuerySet, state: str) -> JobRunQuerySet:
    """Narrow ``runs`` to the claims in ``state``."""
    return _FILTERS[State(state)](runs)


def state_expression() -> Case:
    """The state of each row, as SQL evaluated with the database's clock."""
    running = Q(status=JobRun.Status.RUNNING)
    held = running & Q(expires_at__gt=DatabaseNow())
    return Case(
        When(held, then=Value(State.ACTIVE.value)),
        When(running, then=Value(State.EXPIRED.value)),
        When(status=JobRun.Status.SUCCEEDED, then=Value(State.SUCCEEDED.value)),
        default=Value(State.FAILED.value),
        output_field=models.CharField(),
    )


def with_state(runs: JobRunQuerySet) -> JobRunQuerySet:
    """Annotate ``state``, and ``db_now`` to measure the lease against."""
    return runs.annotate(state=state_expression(), db_now=DatabaseNow())


def claims(*, state: str | None = None, job: str | None = None) -> JobRunQuerySet:
    """Claims with their state, newest first, optionally of one state or job.

    Read from the database the jobs claim on, never from a lagging replica.
    """
    runs = JobRun.objects.using(jobclaims_settings.claims_database(JobRun))
    if state is not None:
        runs = in_state(runs, state)
    if job is not None:
        runs = runs.filter(job=job)
    return with_state(runs).order_by("-claimed_at", "-pk")


def running_counts() -> dict[str, int]:
    """How many claims are active and how many expired, in one query.

    Only running rows are read, through the (status, expires_at) index, so
    the count stays cheap however many finished rows the table keeps.
    """
    now = DatabaseNow()
    runs = JobRun.objects.using(jobclaims_settings.claims_database(JobRun))
    return runs.running().aggregate(
        **{
            State.ACTIVE.value: Count("pk", filter=Q(expires_at__gt=now)),
            State.EXPIRED.value: Count("pk", filter=Q(expires_at__lte=now)),
        }
    )
