"""A process that claims and releases windows of one job, one after another,
as many schedulers' claims would, for the admin's changes made beside them.

``python -m tests.support.busy_claimer JOB`` says "ready" once it has
committed its first claim, claims and releases one new window after another
until its standard input closes, then prints how many it claimed.

After each claim and release it waits half as long as they took, leaving
the file free a third of the time. In SQLite's default journal no read can begin
while a commit writes the file: back to back, on a loaded CI machine whose
disk made each commit slow, its commits kept the admin's own reads of its
session out past the busy timeout. Many schedulers' claims still come far
closer together than any operator's read and write.
"""

from __future__ import annotations

import datetime
import sys
import time

LEASE = datetime.timedelta(minutes=1)


def main(job: str) -> None:
    from jobclaims.claims.rule import Refusal
    from jobclaims.models import JobRun
    from tests.support.helpers import stdin_closed

    ended = stdin_closed()
    claimed = 0
    while not ended.is_set():
        began = time.monotonic()
        run = JobRun.objects.try_claim(job, f"w{claimed}", lease=LEASE)
        if isinstance(run, Refusal):
            raise SystemExit(f"window w{claimed} was refused: {run}")
        run.release()
        claimed += 1
        if claimed == 1:
            print("ready", flush=True)
        time.sleep((time.monotonic() - began) / 2)
    print(claimed, flush=True)


if __name__ == "__main__":
    from jobclaims.running.children import connect_child

    connect_child()
    main(sys.argv[1])
