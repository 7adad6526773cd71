"""Schedulers seen alive: each records its host, pid and schedules.

Health reads these rows to say "no live scheduler" when scheduled jobs
exist and no scheduler was seen within ``JOBCLAIMS["SCHEDULER_GRACE"]``,
and "hosts disagree" when live schedulers run schedules of different fires
for one job: a deploy rolled out to some hosts only. A scheduler that stops
cleanly says so in its row (``SeenRecorder.stopped()``): it is gone at once
and disagrees with no one, where one killed counts until the grace ends.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import DatabaseError

from jobclaims.jobs.schedules import JobSchedule
from jobclaims.models import SchedulerSeen
from jobclaims.time import expressions
from jobclaims.time.bounds import Bounded
from jobclaims.time.clock import DatabaseNow
from jobclaims.time.fire_times import FireTimes

#: A scheduler writes its row at most this often: a bounded write rate,
#: whatever the number of jobs and fires.
SEEN_EVERY = datetime.timedelta(seconds=30)
#: Rows of schedulers not seen for this long are deleted as others write:
#: a crontab's ``--once`` writes a row a minute, and health reads them all.
FORGOTTEN_AFTER = datetime.timedelta(hours=1)


def schedules_run(jobs: Iterable[JobSchedule]) -> dict[str, str]:
    """What each schedule is, by claim name (each of a job's several is its
    own), as the seen row records it: the expression, its zone if it has one
    of its own, and its bounds if it has any (``Bounded.bounds``), so that
    hosts that read one expression in two zones, or bound it apart, disagree."""
    return {job.job: _recorded(job.cron) for job in sorted(jobs, key=lambda job: job.job)}


def _recorded(fires: FireTimes) -> str:
    text = fires.expression + (f" ({fires.time_zone})" if fires.time_zone else "")
    return text + (f" [{fires.bounds}]" if isinstance(fires, Bounded) else "")


def fires_of(recorded: str) -> str:
    """What decides the fires of a schedule as ``schedules_run()`` records it
    (``FireTimes.fires``): two spellings of the same fires are one text.
    A text this code cannot read (a row of other code) stands for itself."""
    recorded_fires, _, limits = recorded.removesuffix("]").partition(" [")
    expression, _, zone = recorded_fires.removesuffix(")").partition(" (")
    try:
        fires = expressions.read(expression, zone or None).fires
    except ValueError:
        return recorded
    return f"{fires} {limits}" if limits else fires


def fingerprint(schedules: dict[str, str]) -> str:
    """A short digest of ``schedules``' fires: schedulers that agree have the same one."""
    fires = {job: fires_of(schedule) for job, schedule in schedules.items()}
    text = json.dumps(fires, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class SeenRecorder:
    """Writes one scheduler's row: when it starts, then at most every ``SEEN_EVERY``."""

    jobs: list[JobSchedule]
    row: SchedulerSeen | None = None
    written_at: datetime.datetime | None = None

    def record(self, now: datetime.datetime) -> None:
        """Record this scheduler alive at ``now`` (the database clock), if it is time."""
        if self.written_at is not None and now - self.written_at < SEEN_EVERY:
            return
        if self.row is None:
            schedules = schedules_run(self.jobs)
            self.row = SchedulerSeen.objects.create(
                host=socket.gethostname()[:255],
                pid=os.getpid(),
                schedules=schedules,
                fingerprint=fingerprint(schedules),
            )
            SchedulerSeen.objects.filter(last_seen_at__lt=now - FORGOTTEN_AFTER).delete()
        else:
            SchedulerSeen.objects.filter(pk=self.row.pk).update(last_seen_at=DatabaseNow())
        self.written_at = now

    def use(self, jobs: list[JobSchedule]) -> None:
        """Record that this scheduler runs ``jobs`` from now on (a stored
        schedule changed), for health to compare with the other hosts'."""
        self.jobs = jobs
        if self.row is not None:
            schedules = schedules_run(jobs)
            SchedulerSeen.objects.filter(pk=self.row.pk).update(
                schedules=schedules, fingerprint=fingerprint(schedules)
            )

    def stopped(self) -> None:
        """Record this scheduler stopped, as its last write: it is no longer
        live, and a job only it ran has no live scheduler once the grace
        has passed. A database that does not answer then leaves the row to
        end with the grace, as a killed scheduler's does."""
        if self.row is None:
            return
        with contextlib.suppress(DatabaseError):
            SchedulerSeen.objects.filter(pk=self.row.pk).update(
                last_seen_at=DatabaseNow(), stopped_at=DatabaseNow()
            )
