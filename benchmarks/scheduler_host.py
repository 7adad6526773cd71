"""A scheduler of the costs benchmark, measured: idle over many jobs, or claiming them.

    python -m benchmarks.scheduler_host idle RESULT_PATH JOBS
    python -m benchmarks.scheduler_host due RESULT_PATH JOBS EXPRESSION
    python -m benchmarks.scheduler_host starts RESULT_PATH JOBS EXPRESSION

Runs ``jobclaims.scheduling.scheduler.Scheduler`` as ``jobclaims_scheduler`` does,
until SIGTERM, and writes what it measured as JSON to RESULT_PATH:

- ``idle``: ``JOBS`` jobs, each on a schedule of its own that fires once a
  year, months away; its CPU time, sampled twice a second.
- ``due``: ``JOBS`` jobs all on ``EXPRESSION``, claimed at each fire. A won
  fire starts nothing, and its claim is left to its lease (the jobs may
  overlap, so the next fire's claims are not refused by it): the figure is
  the claims' own delay, not that of a machine busy starting a thousand
  processes, or of the releases a thousand processes would send.
- ``starts``: as ``due``, and each won fire starts its job (``fleet_job``),
  forked from the fork server, or in a fresh interpreter where
  ``BENCH_FRESH`` is set; ``benchmarks.forked_starts`` reads what the jobs
  recorded as they began.

See ``benchmarks.costs``.
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


def idle_schedules(jobs: int) -> list[str]:
    """A yearly expression per job, each its own, none due for months."""
    month = (datetime.datetime.now(datetime.timezone.utc).month + 5) % 12 + 1
    return [
        f"{number % 60} {number // 60 % 24} {1 + number // 1440 % 28} {month} *"
        for number in range(jobs)
    ]


def main(mode: str, path: str, jobs: int, expression: str = "") -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()
    from jobclaims.jobs.schedules import JobSchedule
    from jobclaims.scheduling import scheduler
    from jobclaims.time.cron import CronSchedule

    expressions = idle_schedules(jobs) if mode == "idle" else [expression] * jobs
    fleet = [
        JobSchedule(
            command="fleet_job",
            job=f"{mode}_{jobs}_{number:05d}",
            cron=CronSchedule(each),
            window=None,
            lease=datetime.timedelta(minutes=1),
            allow_overlap=mode != "idle",
            misfire="skip",
            misfire_deadline=None,
            args=("--name", f"{mode}_{jobs}_{number:05d}"),
            fresh_interpreter=bool(os.environ.get("BENCH_FRESH")),
        )
        for number, each in enumerate(expressions)
    ]

    def start_nothing(self: Any, job: Any, fire: Any, run: Any, delay: Any = None) -> None:
        pass

    if mode != "starts":
        scheduler.Scheduler._start = start_nothing  # type: ignore[method-assign]
    host = scheduler.Scheduler(fleet, max_jobs=jobs, say=lambda line: None)
    samples: list[tuple[float, float]] = []

    def sample() -> None:
        while not host.stopping.wait(0.5):
            usage = resource.getrusage(resource.RUSAGE_SELF)
            samples.append((time.monotonic(), usage.ru_utime + usage.ru_stime))

    threading.Thread(target=sample, daemon=True).start()
    host.run_forever()
    with open(path, "w") as out:
        json.dump({"jobs": jobs, "samples": samples}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:])
