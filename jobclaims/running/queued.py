"""A scheduled fire that reaches its run through a task queue: the worker adopts its claim.

A scheduler that wins a fire of a task schedule (``jobclaims.scheduled()``)
enqueues the task instead of starting a process. The message carries the
fire (``QueuedFire``): its job, window and the token of the claim the
scheduler won, with the schedule's lease and retry policy. The worker that
runs the task adopts that claim (``adopt()``) with one compare-and-set that
gives it a token of its own, so of two copies of one message (a host that
died between its claim and the broker's acknowledgement, a redelivery) the
first adopts and every later one finds the token gone and steps aside:
nothing runs twice, whatever the queue delivers.

Until a worker adopts it, the fire's lease is the queue lease
(``JOBCLAIMS["QUEUE_LEASE"]``), so a slow queue does not have it taken over;
a message the queue lost is enqueued again once that lease ends. The run
then holds its claim as any other (``running.holding``) and, when it fails,
its fire is settled by the schedule's retry policy right there
(``running.attempts``), as a scheduler settles a command's.
"""

from __future__ import annotations

import datetime
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from jobclaims.claims import retries
from jobclaims.claims.engine import process_owner
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import ClaimLost, JobCancelled
from jobclaims.models import JobRun
from jobclaims.running import attempts
from jobclaims.running.attempts import RetryPolicy
from jobclaims.running.holding import holding
from jobclaims.time import leases
from jobclaims.time.clock import DatabaseNow, database_now

logger = logging.getLogger("jobclaims")

#: The keyword argument a Django task's fire reaches its ``@claimed``
#: function with; the wrapper takes it off before it calls the function.
FIRE_KWARG = "jobclaims_fire"
#: Celery message headers: the window a call is for and the token of the
#: claim it holds (a fire's, or a retry's: ``jobclaims.contrib.celery``), and
#: a fire's job, lease and retry policy (JSON).
WINDOW_HEADER = "jobclaims_window"
TOKEN_HEADER = "jobclaims_token"
FIRE_HEADER = "jobclaims_fire"


@dataclass(frozen=True)
class QueuedFire:
    """A fire as its message carries it: which claim to adopt, and how to hold it."""

    job: str
    window: str
    token: str
    lease: datetime.timedelta
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def to_json(self) -> dict[str, Any]:
        """The fire as a JSON object, which every task queue can carry."""
        return {
            "job": self.job,
            "window": self.window,
            "token": self.token,
            "lease": self.lease.total_seconds(),
            "retries": self.retry.retries,
            "backoff": self.retry.backoff.total_seconds(),
            "backoff_max": self.retry.backoff_max.total_seconds(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueuedFire:
        seconds = datetime.timedelta(seconds=1)
        return cls(
            job=data["job"],
            window=data["window"],
            token=data["token"],
            lease=data["lease"] * seconds,
            retry=RetryPolicy(
                data["retries"], data["backoff"] * seconds, data["backoff_max"] * seconds
            ),
        )

    def header(self) -> str:
        """The fire's job, lease and retry policy, for ``FIRE_HEADER``: the
        window and token travel in their own headers, which a retry updates."""
        fields = self.to_json()
        del fields["window"], fields["token"]
        return json.dumps(fields)

    @classmethod
    def from_headers(cls, headers: dict[str, Any]) -> QueuedFire | None:
        """The fire a Celery message carries, or ``None`` for a call of no fire."""
        if not headers.get(FIRE_HEADER):
            return None
        fields = json.loads(headers[FIRE_HEADER])
        return cls.from_json(
            {**fields, "window": headers[WINDOW_HEADER], "token": headers[TOKEN_HEADER]}
        )


def adopt(fire: QueuedFire, owner: str | None = None) -> JobRun | None:
    """Take the fire's claim over from its message, or ``None`` if it no longer holds.

    One compare-and-set: the row of the fire's job and window, still
    running under the token the message carries and within its lease, gets
    a new token and owner, ``started_at`` and the schedule's lease, by the
    database clock. A second copy of the message, or one whose fire another
    host took over and enqueued again, finds the token gone: it steps aside.
    """
    try:
        sent = uuid.UUID(fire.token)
    except ValueError:
        return None
    db = jobclaims_settings.claims_database(JobRun)
    connection = connections[db]
    token = uuid.uuid4()
    sent_at = leases.clock()
    now = retries.retrying(connection, lambda: database_now(db))
    rows = JobRun.objects.using(db).filter(job=fire.job, window=fire.window)
    held = rows.filter(token=sent, status=JobRun.Status.RUNNING, expires_at__gt=DatabaseNow())

    def take() -> int:
        return held.update(
            token=token,
            owner=owner or process_owner(),
            started_at=DatabaseNow(),
            expires_at=now + fire.lease,
        )

    # A try whose answer was lost may have taken it: the row then has our token.
    retries.retrying(connection, take)
    run = retries.retrying(connection, rows.filter(token=token).first)
    if run is not None:
        run.held_until = leases.held_until(sent_at, fire.lease)
    return run


@contextmanager
def running(
    fire: QueuedFire,
    run: JobRun,
    max_run_time: datetime.timedelta | None = None,
    keep_on: tuple[type[BaseException], ...] = (),
    on_cancel: Callable[[JobCancelled], None] | None = None,
) -> Iterator[JobRun]:
    """Hold an adopted fire's claim while the task runs (``holding()``), and
    settle a failure by the schedule's retry policy: ``retrying`` after the
    backoff while retries are left, then ``failed``; every scheduler claims
    a due retry and enqueues it again, so each attempt runs once."""
    try:
        with holding(run, fire.lease, max_run_time, keep_on=keep_on, on_cancel=on_cancel):
            yield run
    except (ClaimLost, JobCancelled):
        raise  # Its row says so already: nothing to settle.
    except keep_on:
        raise
    except BaseException:
        status = attempts.after_failure(run, fire.retry, "The task raised.")
        if status == JobRun.Status.RETRYING:
            logger.info("%s failed; its schedule retries it", run)
        raise


def stepped_aside(fire: QueuedFire) -> str:
    """Why a copy of a fire's message runs nothing, for the worker's log."""
    return (
        f"Not running {fire.job} {fire.window}: the claim its message carries "
        "is no longer held (another copy of the message adopted it, or its "
        "fire was taken over and enqueued again, or it ended)"
    )
