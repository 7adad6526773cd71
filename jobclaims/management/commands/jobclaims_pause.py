from __future__ import annotations

import argparse
import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from jobclaims.claims import naming
from jobclaims.controls import pauses
from jobclaims.exceptions import UnknownJob
from jobclaims.management.base import OperatorCommand
from jobclaims.time import wall_times


def moment(text: str) -> datetime.datetime:
    """argparse type for ``--until``: an ISO 8601 date or date-time, in TIME_ZONE if naive."""
    try:
        return wall_times.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}, like 2026-12-02T06:00") from None


def one_or_all(options: dict[str, Any], verb: str) -> str:
    """The job ``options`` name, ``pauses.ALL_JOBS`` for ``--all``, or the
    pause of a ``--tag``: one of the three, or a ``CommandError`` naming the fix."""
    job: str | None = options["job"]
    everyone: bool = options["all"]
    tag: str | None = options["tag"]
    if tag is not None:
        if job is not None or everyone:
            raise CommandError(
                f"--tag {verb}s every job tagged {tag}, so name no job and no --all beside it"
            )
        return naming.tag_pause(tag)
    if everyone and job is not None:
        raise CommandError(
            f"--all {verb}s every job, so name no job beside it; "
            f"or name the job alone to {verb} only it"
        )
    if everyone:
        return pauses.ALL_JOBS
    if job is None:
        raise CommandError(f"name the job to {verb}, or pass --all to {verb} every job")
    if job == pauses.ALL_JOBS:
        raise CommandError(f"{job!r} is no job's name; pass --all to {verb} every job")
    if job.startswith(naming.TAG_MARK):
        tag = job.removeprefix(naming.TAG_MARK)
        raise CommandError(f"{job!r} is no job's name; pass --tag {tag} to {verb} its jobs")
    return job


def tagged(job: str) -> str | None:
    """The tag ``job`` is the pause of, if it is one's."""
    return job.removeprefix(naming.TAG_MARK) if job.startswith(naming.TAG_MARK) else None


class Command(OperatorCommand):
    help = (
        "Pause a job, or every job with --all: no run of it starts, however it is started, "
        "until it is resumed (jobclaims_resume) or until --until."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", nargs="?", help="The job's name, as its claims record it.")
        parser.add_argument(
            "--all",
            action="store_true",
            help="Pause every job (a maintenance window), whatever its own pauses.",
        )
        parser.add_argument(
            "--tag",
            metavar="TAG",
            help="Pause every job tagged TAG (JobCommand.tags), whatever its own pauses.",
        )
        parser.add_argument(
            "--until",
            type=moment,
            metavar="WHEN",
            help="End the pause then: a date-time, in TIME_ZONE unless it has an offset.",
        )
        parser.add_argument("--reason", default="", help="Why, for the other operators.")

    def handle(self, *args: Any, **options: Any) -> None:
        job = one_or_all(options, "pause")
        try:
            pause = pauses.pause(
                job, by=pauses.os_user(), reason=options["reason"], until=options["until"]
            )
        except (UnknownJob, ValueError) as error:
            raise CommandError(error) from error
        everyone = job == pauses.ALL_JOBS
        if pause.until:
            ends = f"until {timezone.localtime(pause.until):%Y-%m-%d %H:%M:%S %Z}"
        else:
            ends = "until they are resumed" if everyone else "until it is resumed"
        if everyone:
            self.stdout.write(f"Paused all jobs {ends}: no run of any job starts meanwhile.")
        elif (tag := tagged(job)) is not None:
            self.stdout.write(
                f"Paused every job tagged {tag} {ends.replace('it is', 'they are')}: "
                "no run of them starts meanwhile."
            )
        else:
            self.stdout.write(f"Paused {job} {ends}: no run of it starts meanwhile.")
