from __future__ import annotations

import argparse
import datetime
import math
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from jobclaims.conf import jobclaims_settings
from jobclaims.jobs.commands import check_a_job_run
from jobclaims.jobs.discovery import job_commands, usable_jobs
from jobclaims.jobs.schedules import JobSchedule
from jobclaims.management.base import OperatorCommand
from jobclaims.models import JobRun
from jobclaims.monitoring.health import checked_overview
from jobclaims.monitoring.overview import describe
from jobclaims.scheduling.live_schedules import LiveSchedules
from jobclaims.scheduling.scheduler import Scheduler
from jobclaims.time.clock import database_now


def _at_least_one(text: str) -> int:
    """argparse type for ``--max-jobs``: a whole number above 0."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of jobs above 0")
    return int(text)


def _grace_seconds(text: str) -> datetime.timedelta:
    """argparse type for ``--grace``: a number of seconds, 0 or more."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= seconds < 86400 or math.isnan(seconds):
        raise argparse.ArgumentTypeError(
            f"the grace must be 0 seconds or more and under a day, not {text}"
        )
    return datetime.timedelta(seconds=seconds)


class Command(OperatorCommand):
    help = (
        "Start every scheduled job at its fire times; run it on every host that may run "
        "jobs, and each fire runs on one of them. --once starts what is due and exits, "
        "for a crontab line; --list shows the schedules."
    )

    def check(self, *args: Any, **kwargs: Any) -> None:
        """The system checks, as a job's own run has them (``check_a_job_run()``):
        a ``--once`` crontab line need not mail the deployment's every minute."""
        check_a_job_run(super().check, *args, **kwargs)

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
            help=(
                "Schedule only this job (repeat for more), each of its schedules, or one "
                "schedule by its claim name (job[name]); default: every scheduled job."
            ),
        )
        parser.add_argument(
            "--max-jobs",
            type=_at_least_one,
            default=4,
            metavar="N",
            help="Run at most N jobs at once on this host (default: 4).",
        )
        parser.add_argument(
            "--grace",
            type=_grace_seconds,
            metavar="SECONDS",
            help=(
                "When stopped (SIGTERM, SIGINT), let running jobs finish for this long, "
                "then interrupt them and hand their fires to another scheduler "
                "(default: JOBCLAIMS['STOP_GRACE'], 25 s). Keep it a few seconds below "
                "systemd's TimeoutStopSec or Kubernetes' terminationGracePeriodSeconds."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.verbosity = options["verbosity"]
        jobs, problems = usable_jobs()
        chosen = options["jobs"]
        for name, problem in problems.items():
            # A job named with --job that cannot run is an error; otherwise
            # the others run, and the one left out is named every time.
            if chosen and name in chosen:
                raise CommandError(problem)
            self.stderr.write(f"{problem}; this job is left out until it is fixed")
        live = LiveSchedules(jobs, chosen, self._warn)
        try:
            jobs = live.read()
        except DatabaseError as error:
            if options["list"]:
                raise
            if options["once"]:
                raise _not_answered(error) from error
            # The loop reads them once the database answers, as it waits for it.
            self._warn(f"The database did not answer ({_first_line(error)}); trying again")
            jobs = live.chosen_code_jobs()
        if chosen:
            _require_chosen(live.every or live.code_jobs, chosen)
        if options["list"]:
            now = database_now(jobclaims_settings.claims_database(JobRun))
            for job in jobs:
                self.stdout.write(describe(checked_overview(job, now)))
            if not jobs:
                self.stdout.write(
                    "No job has a schedule: set schedule on a JobCommand, or add a stored schedule."
                )
            return
        if not jobs and options["once"]:
            raise CommandError(
                "No job has a schedule: set schedule on a JobCommand, or add a stored schedule."
            )
        grace = options["grace"]
        scheduler = Scheduler(
            jobs,
            max_jobs=options["max_jobs"],
            say=self._say,
            warn=self._warn,
            grace=jobclaims_settings.stop_grace if grace is None else grace,
            verbosity=self.verbosity,
            live=live,
            ends_process=True,
        )
        if options["once"]:
            try:
                scheduler.once()
            except DatabaseError as error:
                raise _not_answered(error) from error
        else:
            names = ", ".join(job.label for job in jobs) or "no job yet (none has a schedule)"
            self._say(f"Scheduling {names}, at most {options['max_jobs']} at once")
            scheduler.run_forever()

    def _say(self, line: str) -> None:
        """What the scheduler does, unless -v 0 asks for quiet."""
        if self.verbosity:
            self.stdout.write(line)
            self.stdout.flush()

    def _warn(self, line: str) -> None:
        """What went wrong, whatever the verbosity."""
        self.stderr.write(line)
        self.stderr.flush()


def _first_line(error: DatabaseError) -> str:
    return str(error).strip().partition("\n")[0]


def _not_answered(error: DatabaseError) -> CommandError:
    return CommandError(
        f"The database did not answer ({_first_line(error)}), so nothing was started; "
        "the next --once tries again"
    )


def _require_chosen(jobs: list[JobSchedule], names: list[str]) -> None:
    """Refuse a ``--job`` name that names no job: a ``JobCommand`` (whose
    stored schedules may come later), or a schedule by its claim name."""
    commands = job_commands()
    for name in names:
        if name not in commands and not any(name in (job.command, job.job) for job in jobs):
            known = ", ".join(dict.fromkeys(job.command for job in jobs)) or "none"
            raise CommandError(
                f"{name!r} is not a scheduled job; the scheduled jobs are: {known} (or name "
                "a JobCommand without a schedule, for the stored schedules it will have)"
            )
