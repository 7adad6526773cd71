"""Schedulers seen alive: each records its host, pid and schedules.

Health reads these rows to say "no live scheduler" when scheduled jobs
exist and no scheduler was seen within ``JOBCLAIMS["SCHEDULER_GRACE"]``,
and "hosts disagree" when live schedulers run different schedules for one
job: a deploy rolled out to some hosts only.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from jobclaims.clock import DatabaseNow
from jobclaims.models import SchedulerSeen
from jobclaims.schedules import JobSchedule

#: A scheduler writes its row at most this often: a bounded write rate,
#: whatever the number of jobs and fires.
SEEN_EVERY = datetime.timedelta(seconds=30)
#: Rows of schedulers not seen for this long are deleted as others write:
#: a crontab's ``--once`` writes a row a minute, and health reads them all.
FORGOTTEN_AFTER = datetime.timedelta(hours=1)


def schedules_run(jobs: Iterable[JobSchedule]) -> dict[str, str]:
    """What each schedule is, by claim name (each of a job's several is its
    own), as the seen row records it: the expression, and its zone if it has
    one of its own, so that hosts that read one expression in two zones disagree."""
    return {
        job.job: job.cron.expression + (f" ({job.cron.time_zone})" if job.cron.time_zone else "")
        for job in sorted(jobs, key=lambda job: job.job)
    }


def fingerprint(schedules: dict[str, str]) -> str:
    """A short digest of ``schedules``: schedulers that agree have the same one."""
    text = json.dumps(schedules, sort_keys=True)
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
