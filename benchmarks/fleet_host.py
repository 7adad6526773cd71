"""One "host" of the fleet benchmark: a scheduler over the fleet's jobs, measured.

    python -m benchmarks.fleet_host RESULT_PATH JOBS EXPRESSION

Runs ``jobclaims.scheduling.scheduler.Scheduler`` as ``jobclaims_scheduler``
does, until SIGTERM, counting the statements its claims send at each instant
(a look that claimed), the fires it won and lost there, and the CPU it uses,
then writes the figures as JSON to RESULT_PATH.
"""

from __future__ import annotations

import datetime
import json
import os
import resource
import sys
import threading
import time
from typing import Any


def main(path: str, jobs: int, expression: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()
    from django.db import connection

    from jobclaims.jobs.schedules import JobSchedule
    from jobclaims.scheduling import scheduler
    from jobclaims.time.cron import CronSchedule

    fleet = [
        JobSchedule(
            command="fleet_job",
            job=f"fleet_{number:02d}",
            cron=CronSchedule(expression),
            window=None,
            lease=datetime.timedelta(minutes=1),
            allow_overlap=False,
            misfire="latest",
            misfire_deadline=None,
            # Its name in its arguments: its fires are a series of their own,
            # as each job's are (the same arguments and times would be one
            # schedule under several names, run once per fire in all).
            args=("--name", f"fleet_{number:02d}"),
        )
        for number in range(jobs)
    ]

    figures: dict[str, Any] = {"won": 0, "lost": 0, "instants": []}
    statements: list[str] = []
    claiming = [0]

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql.split(None, 1)[0].upper() if claiming[0] else "")
        return execute(sql, params, many, context)

    def claims(method: Any) -> Any:
        """Mark the statements ``method`` sends as a claim's."""

        def measured(*args: Any, **kwargs: Any) -> Any:
            claiming[0] += 1
            try:
                return method(*args, **kwargs)
            finally:
                claiming[0] -= 1

        return measured

    start_due, start = scheduler.Scheduler.start_due, scheduler.Scheduler._start
    starts = [0]

    def counted_start(self: Any, job: Any, fire: Any, run: Any, delay: Any = None) -> None:
        starts[0] += 1
        if os.environ.get("BENCH_CLAIMS_ONLY"):
            run.release()  # Each fire's claim alone is measured: no process.
        else:
            start(self, job, fire, run, delay)

    def one_by_one(self: Any, together: Any, won: Any) -> None:
        """The claims before batches, side by side: each fire's in turn."""
        for job, fire, key in together:
            self._claim_in_turn(job, [(fire, key)], won)

    def look(self: Any, now: datetime.datetime) -> None:
        """One look: the claims' statements it sent, and the fires it won and lost."""
        before, starts_before = len(statements), starts[0]
        tried = dict(self.tried)
        start_due(self, now)
        sent = [kind for kind in statements[before:] if kind]
        if not sent:
            return
        won = starts[0] - starts_before
        looked = sum(1 for name, fire in self.tried.items() if tried.get(name) != fire)
        figures["won"] += won
        figures["lost"] += looked - won
        figures["instants"].append({"won": won, "lost": looked - won, "statements": sent})

    if os.environ.get("BENCH_ONE_BY_ONE"):
        scheduler.Scheduler._claim_together = one_by_one  # type: ignore[method-assign]
    scheduler.Scheduler._start = counted_start  # type: ignore[method-assign]
    scheduler.Scheduler._claim_together = claims(scheduler.Scheduler._claim_together)  # type: ignore[method-assign]
    scheduler.Scheduler._try_claim = claims(scheduler.Scheduler._try_claim)  # type: ignore[method-assign]
    scheduler.Scheduler.start_due = look  # type: ignore[method-assign]
    samples: list[tuple[float, float, int]] = []
    host = scheduler.Scheduler(fleet, max_jobs=jobs, say=lambda line: None)

    def sample() -> None:
        while not host.stopping.wait(0.5):
            usage = resource.getrusage(resource.RUSAGE_SELF)
            samples.append((time.time(), usage.ru_utime + usage.ru_stime, len(host.children)))

    threading.Thread(target=sample, daemon=True).start()
    started = time.time()
    with connection.execute_wrapper(count):
        host.run_forever()
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures.update(
        seconds=time.time() - started,
        statements=len(statements),
        cpu_seconds=own.ru_utime + own.ru_stime,
        children_cpu_seconds=children.ru_utime + children.ru_stime,
        samples=samples,
    )
    with open(path, "w") as out:
        json.dump(figures, out)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
