"""What jobclaims' operator commands share: a claims database that cannot
be reached ends them in one line.

An operator runs these by hand or from a runbook, often because something
is wrong, and a failover or a stopped server is exactly then: Django's
traceback of the driver's connect buries the one fact that matters. Each
statement the commands send is whole (a pause, a cancel, one batch of a
prune), so what a command had done before the error stands, and running it
again finishes it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError

from jobclaims.claims import retries


class OperatorCommand(BaseCommand):
    """A command whose database that does not answer ends it with one line
    and exit status 1, as a job's own command's claim does."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except OperationalError as error:
            name = type(self).__module__.rpartition(".")[2]
            raise CommandError(
                f"{name} stopped: the claims database answered {retries.summary(error)}; "
                "run it again once the database answers"
            ) from error
