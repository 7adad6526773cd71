from __future__ import annotations

import argparse
import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from jobclaims import pauses, wall_times
from jobclaims.exceptions import UnknownJob


def moment(text: str) -> datetime.datetime:
    """argparse type for ``--until``: an ISO 8601 date or date-time, in TIME_ZONE if naive."""
    try:
        return wall_times.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}, like 2026-12-02T06:00") from None


class Command(BaseCommand):
    help = (
        "Pause a job: no run of it starts, however it is started, until it is resumed "
        "(jobclaims_resume) or until --until."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", help="The job's name, as its claims record it.")
        parser.add_argument(
            "--until",
            type=moment,
            metavar="WHEN",
            help="End the pause then: a date-time, in TIME_ZONE unless it has an offset.",
        )
        parser.add_argument("--reason", default="", help="Why, for the other operators.")

    def handle(self, *args: Any, **options: Any) -> None:
        job = options["job"]
        try:
            pause = pauses.pause(
                job, by=pauses.os_user(), reason=options["reason"], until=options["until"]
            )
        except (UnknownJob, ValueError) as error:
            raise CommandError(error) from error
        ends = (
            f"until {timezone.localtime(pause.until):%Y-%m-%d %H:%M:%S %Z}"
            if pause.until
            else "until it is resumed"
        )
        self.stdout.write(f"Paused {job} {ends}: no run of it starts meanwhile.")
