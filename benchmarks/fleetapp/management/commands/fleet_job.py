from __future__ import annotations

import json
import os
import time
from typing import Any

from django.core.management.base import CommandParser

from jobclaims import JobCommand
from jobclaims.models import JobRun


class Command(JobCommand):
    """The fleet benchmark's job: one command that runs as any of its 50 jobs."""

    help = "Benchmark job: does nothing, as the job --name names."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--name", required=True, help="The job to run as.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.job_name = options["name"]
        super().handle(*args, **options)

    def run_job(self, run: JobRun, *args: Any, **options: Any) -> None:
        # The forked starts benchmark: when its run began, and the CPU its
        # process had used by then (benchmarks/forked_starts.py).
        if path := os.environ.get("BENCH_ENTRIES"):
            entered = {"window": run.window, "at": time.time(), "cpu": time.process_time()}
            with open(path, "a") as entries:
                entries.write(json.dumps(entered) + "\n")
