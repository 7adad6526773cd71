from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobclaims import pauses
from jobclaims.exceptions import UnknownJob


class Command(BaseCommand):
    help = "Resume a job paused with jobclaims_pause: its next run starts as usual."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", help="The job's name, as its claims record it.")

    def handle(self, *args: Any, **options: Any) -> None:
        job = options["job"]
        try:
            resumed = pauses.resume(job, by=pauses.os_user())
        except UnknownJob as error:
            raise CommandError(error) from error
        if not resumed:
            self.stdout.write(f"{job} was not paused; nothing was changed.")
            return
        self.stdout.write(f"Resumed {job}: its next run starts as usual.")
