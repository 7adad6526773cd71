"""Claims in a chosen state, placed in time by the database's clock."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, cast

from jobclaims.claims.rule import State
from jobclaims.models import JobRun, Skips
from jobclaims.time.clock import database_now

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

LEASE = datetime.timedelta(minutes=10)
RUN_TIME = datetime.timedelta(seconds=95)
OWNER = "web-1:4242:0c0ffee0"


def claim_in_state(
    state: str,
    job: str = "charge_invoices",
    window: str = "2026-11-29",
    *,
    age: datetime.timedelta = datetime.timedelta(0),
    **fields: object,
) -> JobRun:
    """Save a claim in ``state``; see ``claim_fields()`` for ``age``."""
    columns = claim_fields(state, job, window, database_now(), age)
    return JobRun.objects.create(**{**columns, **fields})


def stored_with_skips() -> WithAnnotations[JobRun, Skips]:
    """The one stored claim, with the skips ``with_skips()`` counts for it.

    The cast names the annotation, which django-stubs does not carry through
    JobRunQuerySet's own methods.
    """
    return cast("WithAnnotations[JobRun, Skips]", JobRun.objects.with_skips().get())


def claim_fields(
    state: str,
    job: str,
    window: str,
    now: datetime.datetime,
    age: datetime.timedelta = datetime.timedelta(0),
) -> dict[str, object]:
    """The columns of a claim in ``state`` as seen at ``now``.

    A running claim was taken ``age`` ago (an expired one at least a lease and
    a minute ago); a finished one ended ``age`` ago, after ``RUN_TIME``.
    """
    columns: dict[str, object] = {"job": job, "window": window, "owner": OWNER}
    if state in (State.ACTIVE, State.EXPIRED):
        if state == State.EXPIRED:
            age = max(age, LEASE + datetime.timedelta(minutes=1))
        claimed_at = now - age
        expires_at = claimed_at + LEASE if state == State.EXPIRED else now + LEASE
        return {
            **columns,
            "status": JobRun.Status.RUNNING,
            "claimed_at": claimed_at,
            "expires_at": expires_at,
        }
    finished_at = now - age
    expires_at = finished_at - RUN_TIME + LEASE
    if state == State.RETRYING:  # Its retry is due.
        columns["retry_at"] = finished_at
    if state == State.CANCELLED:  # Its process stopped and let go of it.
        expires_at = finished_at
    return {
        **columns,
        "status": state,
        "claimed_at": finished_at - RUN_TIME,
        "expires_at": expires_at,
        "finished_at": finished_at,
    }


def cancelled_while_held(job: str, window: str, **fields: object) -> JobRun:
    """A run an operator cancelled whose process has not stopped yet: its lease,
    and its hold on the job, kept as the cancel found them."""
    held: dict[str, object] = {"cancelled_by": "alice", "holds_job": True}
    columns = claim_fields(State.CANCELLED, job, window, database_now())
    return JobRun.objects.create(
        **{**columns, **held, "expires_at": database_now() + LEASE, **fields}
    )
