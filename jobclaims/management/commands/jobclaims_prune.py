from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobclaims import durations
from jobclaims.pruning import prune, prune_skips


class Command(BaseCommand):
    help = (
        "Delete claims that finished, and skips recorded, longer ago than "
        "--older-than, in short batches, keeping every running claim and the "
        "finished claim of each job's latest window (so its next instance "
        "still finds it done); it can run from cron."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            type=durations.age,
            required=True,
            metavar="AGE",
            help="How long ago, by the database's clock: 30d, 12h or 90m.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Count what would be deleted, and delete nothing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        age, dry_run = options["older_than"], options["dry_run"]
        claims = prune(age, dry_run=dry_run)
        skips = prune_skips(age, dry_run=dry_run)
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(
            f"{verb} {_counted(claims, 'finished claim')} and {_counted(skips, 'skip')}."
        )


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
