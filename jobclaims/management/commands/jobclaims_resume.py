from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from jobclaims.controls import pauses
from jobclaims.exceptions import UnknownJob
from jobclaims.management.base import OperatorCommand
from jobclaims.management.commands.jobclaims_pause import one_or_all, tagged


class Command(OperatorCommand):
    help = (
        "Resume a job paused with jobclaims_pause, or every job with --all: "
        "its next run starts as usual."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", nargs="?", help="The job's name, as its claims record it.")
        parser.add_argument(
            "--all",
            action="store_true",
            help="End the pause of every job (jobclaims_pause --all); each job's own stay.",
        )
        parser.add_argument(
            "--tag",
            metavar="TAG",
            help="End the pause of the jobs tagged TAG (jobclaims_pause --tag); their own stay.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        job = one_or_all(options, "resume")
        try:
            resumed = pauses.resume(job, by=pauses.os_user())
        except UnknownJob as error:
            raise CommandError(error) from error
        if job == pauses.ALL_JOBS:
            self.stdout.write(
                "Resumed all jobs: their next runs start as usual; a job paused on its own "
                "stays paused."
                if resumed
                else "All jobs were not paused at once; nothing was changed."
            )
            return
        if (tag := tagged(job)) is not None:
            self.stdout.write(
                f"Resumed every job tagged {tag}: their next runs start as usual; a job paused "
                "on its own stays paused."
                if resumed
                else f"The jobs tagged {tag} were not paused by their tag; nothing was changed."
            )
            return
        switch = pauses.in_force(pauses.ALL_JOBS)
        if switch is None:
            self.stdout.write(
                f"Resumed {job}: its next run starts as usual."
                if resumed
                else f"{job} was not paused; nothing was changed."
            )
            return
        said = f"Resumed {job}" if resumed else f"{job} was not paused on its own; nothing changed"
        self.stdout.write(
            f"{said}, but all jobs are still paused by {switch.paused_by}: no run of it starts "
            "until manage.py jobclaims_resume --all."
        )
