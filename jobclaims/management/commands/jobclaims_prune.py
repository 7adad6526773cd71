from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from jobclaims.conf import jobclaims_settings
from jobclaims.controls.pruning import prune, prune_history, prune_skips
from jobclaims.management.base import OperatorCommand
from jobclaims.time import durations


class Command(OperatorCommand):
    help = (
        "Delete claims that finished, and skips recorded, longer ago than "
        "--older-than (or past the bounds JOBCLAIMS['HISTORY_MAX_AGE'] and "
        "['HISTORY_MAX_ROWS_PER_JOB'] set, which the schedulers keep by themselves), "
        "in short batches, keeping every running claim and the finished claim of "
        "each job's latest window (so its next instance still finds it done); it "
        "can run from cron."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            type=durations.age,
            metavar="AGE",
            help=(
                "How long ago, by the database's clock: 30d, 12h or 90m. Without it, "
                "the history's bounds in the settings."
            ),
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Count what would be deleted, and delete nothing (with --older-than).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        age, dry_run = options["older_than"], options["dry_run"]
        if age is None:
            self._prune_to_bounds(dry_run)
            return
        claims = prune(age, dry_run=dry_run)
        skips = prune_skips(age, dry_run=dry_run)
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(
            f"{verb} {_counted(claims, 'finished claim')} and {_counted(skips, 'skip')}."
        )

    def _prune_to_bounds(self, dry_run: bool) -> None:
        max_age = jobclaims_settings.history_max_age
        rows = jobclaims_settings.history_max_rows_per_job
        if dry_run:
            raise CommandError("--dry-run counts what --older-than AGE would delete: pass one")
        if max_age is None and rows is None:
            raise CommandError(
                "The settings keep history forever (JOBCLAIMS['HISTORY_MAX_AGE'] and "
                "['HISTORY_MAX_ROWS_PER_JOB'] are None): pass --older-than AGE, or set one"
            )
        pruned = prune_history(max_age, rows, keep_younger_than=jobclaims_settings.missed_look_back)
        self.stdout.write(pruned.said())


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
