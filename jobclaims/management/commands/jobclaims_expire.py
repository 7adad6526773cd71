from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from jobclaims.exceptions import UnknownClaim
from jobclaims.management.base import OperatorCommand
from jobclaims.models import JobRun


class Command(OperatorCommand):
    help = "End the lease of a job's held claim now, so that its next run takes over."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", help="The job's name, as the claims record it.")
        parser.add_argument(
            "--window",
            metavar="KEY",
            help="Expire only this window's claim (default: any the job holds).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        job = options["job"]
        try:
            expired = JobRun.objects.expire_held(job, options["window"])
        except UnknownClaim as error:
            raise CommandError(error) from error
        if not expired:
            self.stdout.write(f"{job} holds no active claim; nothing was expired.")
            return
        claims = "claim" if expired == 1 else "claims"
        self.stdout.write(f"Expired {expired} {claims} of {job}: its next run takes over.")
