from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from jobclaims.controls import pauses
from jobclaims.exceptions import UnknownClaim
from jobclaims.management.base import OperatorCommand
from jobclaims.running import cancels

#: What a cancel does, whoever runs the job (``jobclaims.running.cancels``).
TOLD = (
    "its writes in run.fenced() are refused from now on, and each one's process is told "
    "within about a second (a job or a task stops there; a claim() block runs on)."
)


class Command(OperatorCommand):
    help = (
        "Cancel a job's running run from any host: its fenced writes are refused from now "
        "on, its process is stopped within about a second, and it ends cancelled."
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
        self.stdout.write(f"Cancelled {cancelled} {runs} of {job}: {TOLD}")
