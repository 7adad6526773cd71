from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import CommandError, CommandParser

from jobclaims.controls.retiring import retire
from jobclaims.exceptions import UnknownJob
from jobclaims.management.base import OperatorCommand


class Command(OperatorCommand):
    help = (
        "Retire a job removed or renamed in the code, so that health stops "
        "watching it; its claims stay for history, and a new claim brings it back."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", help="The job's name, as the claims record it.")
        parser.add_argument("--reason", default="", help="Why, for the next operator to read.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            retired = retire(options["job"], getpass.getuser(), options["reason"])
        except UnknownJob as error:
            raise CommandError(error) from error
        self.stdout.write(
            f"Retired {retired.job}: health no longer watches it, until it is claimed again."
        )
