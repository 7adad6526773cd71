"""One "host" of the fleet benchmark: a scheduler over the fleet's jobs, measured.

    python -m benchmarks.fleet_host RESULT_PATH JOBS EXPRESSION

Runs ``jobclaims.scheduling.scheduler.Scheduler`` as ``jobclaims_scheduler`` does, until
SIGTERM, counting the statements each claim sends (won or lost) and the CPU
it uses, then writes the figures as JSON to RESULT_PATH.
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

    from jobclaims.claims.rule import Refusal
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

    figures: dict[str, Any] = {"won": 0, "lost": 0, "won_statements": [], "lost_statements": []}
    statements: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql.split(None, 1)[0].upper())
        return execute(sql, params, many, context)

    claim = scheduler.Scheduler._try_claim

    def measured(self: Any, job: Any, key: str, *, retry: bool = False) -> Any:
        before = len(statements)
        run = claim(self, job, key, retry=retry)
        outcome = "lost" if isinstance(run, Refusal) else "won"
        figures[outcome] += 1
        figures[f"{outcome}_statements"].append(statements[before:])
        return run

    scheduler.Scheduler._try_claim = measured  # type: ignore[method-assign]
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
