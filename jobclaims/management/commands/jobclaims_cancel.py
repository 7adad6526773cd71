from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobclaims import cancels, pauses
from jobclaims.exceptions import UnknownClaim


class Command(BaseCommand):
    help = (
        "Cancel a job's running run from any host: its writes are refused from now on, "
        "its process is stopped, and it ends cancelled."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", help="The job's name, as its claims record it.")
        parser.add_argument(
            "--window",
            metavar="KEY",
            help="Cancel only this window's run (default: any of the job's that runs).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        job = options["job"]
        try:
            cancelled = cancels.cancel(job, options["window"], by=pauses.os_user())
        except UnknownClaim as error:
            raise CommandError(error) from error
        if not cancelled:
            self.stdout.write(f"{job} has no running run; nothing was cancelled.")
            return
        runs = "run" if cancelled == 1 else "runs"
        self.stdout.write(
            f"Cancelled {cancelled} {runs} of {job}: each one's process is told and stops."
        )
