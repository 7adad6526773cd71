from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobclaims.clock import database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.health import checked_overview
from jobclaims.models import JobRun
from jobclaims.scheduler import Scheduler, scheduled_jobs
from jobclaims.schedules import JobSchedule, describe


def _at_least_one(text: str) -> int:
    """argparse type for ``--max-jobs``: a whole number above 0."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of jobs above 0")
    return int(text)


class Command(BaseCommand):
    help = (
        "Start every scheduled job at its fire times; run it on every host that may run "
        "jobs, and each fire runs on one of them. --once starts what is due and exits, "
        "for a crontab line; --list shows the schedules."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="Start what is due now, wait for it, and exit."
        )
        parser.add_argument(
            "--list",
            action="store_true",
            help="List every scheduled job: schedule, next fires, last run, missed fires.",
        )
        parser.add_argument(
            "--job",
            action="append",
            dest="jobs",
            metavar="COMMAND",
            help="Schedule only this job (repeat for more); default: every scheduled job.",
        )
        parser.add_argument(
            "--max-jobs",
            type=_at_least_one,
            default=4,
            metavar="N",
            help="Run at most N jobs at once on this host (default: 4).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            jobs = scheduled_jobs()
        except ValueError as error:
            raise CommandError(error) from error
        if options["jobs"]:
            jobs = _chosen(jobs, options["jobs"])
        if options["list"]:
            now = database_now(jobclaims_settings.claims_database(JobRun))
            for job in jobs:
                self.stdout.write(describe(checked_overview(job, now)))
            if not jobs:
                self.stdout.write("No job has a schedule: set schedule on a JobCommand.")
            return
        if not jobs:
            raise CommandError("No job has a schedule: set schedule on a JobCommand.")
        scheduler = Scheduler(jobs, max_jobs=options["max_jobs"], say=self._say)
        if options["once"]:
            scheduler.once()
        else:
            names = ", ".join(job.command for job in jobs)
            self._say(f"Scheduling {names}, at most {options['max_jobs']} at once")
            scheduler.run_forever()

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()


def _chosen(jobs: list[JobSchedule], names: list[str]) -> list[JobSchedule]:
    by_name = {job.command: job for job in jobs}
    for name in names:
        if name not in by_name:
            known = ", ".join(by_name) or "none"
            raise CommandError(f"{name!r} is not a scheduled job; the scheduled jobs are: {known}")
    return [by_name[name] for name in dict.fromkeys(names)]
