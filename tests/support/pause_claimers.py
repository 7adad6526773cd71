"""A process that claims new windows of one job as fast as it can, and starts
each one a moment later, for the race of claims and starts against pauses.

``python -m tests.support.pause_claimers JOB`` claims ``JOB``'s windows one
after another until its standard input closes. Each claim won waits up to
``STARTUP`` (as a scheduler's child starting up, or a jitter, would) and
then starts under ``holding()``, as every way a job starts does. It prints
one line per event, with the database clock's time:
``won WINDOW CLAIMED_AT``, ``started WINDOW NOW`` (read in the run's block)
and ``given-back WINDOW`` (the run's look at the pauses refused its start).
"""

from __future__ import annotations

import datetime
import os
import random
import sys
import time

#: The longest a won claim waits before it starts: a job process's start-up.
STARTUP = 1.0
LEASE = datetime.timedelta(minutes=1)


def main(job: str) -> None:
    from jobclaims.claims.rule import Refusal
    from jobclaims.exceptions import PausedBeforeStart
    from jobclaims.models import JobRun
    from jobclaims.running.holding import holding
    from jobclaims.time.clock import database_now
    from tests.support.helpers import stdin_closed

    ended = stdin_closed()
    print("ready", flush=True)
    number = 0
    while not ended.is_set():
        number += 1
        window = f"{os.getpid()}-{number}"
        run = JobRun.objects.try_claim(job, window, lease=LEASE, allow_overlap=True)
        if isinstance(run, Refusal):
            time.sleep(0.005)
            continue
        print(f"won {window} {run.claimed_at.isoformat()}", flush=True)
        time.sleep(random.uniform(0, STARTUP))
        try:
            with holding(run, LEASE):
                print(f"started {window} {database_now().isoformat()}", flush=True)
        except PausedBeforeStart:
            print(f"given-back {window}", flush=True)


if __name__ == "__main__":
    from jobclaims.running.children import connect_child

    connect_child()
    main(sys.argv[1])
