from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobclaims import backfills
from jobclaims.exceptions import UnknownJob
from jobclaims.management.commands.jobclaims_pause import moment


class Command(BaseCommand):
    help = (
        "Run a job now, or each of its windows from --from to --to, oldest first, "
        "each claimed as usual: a window held or done elsewhere is skipped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", help="The job's command, or the name its claims record.")
        parser.add_argument(
            "--from",
            dest="start",
            type=moment,
            metavar="WHEN",
            help="Backfill: the first window or fire to run (a date or date-time, in TIME_ZONE).",
        )
        parser.add_argument(
            "--to",
            dest="end",
            type=moment,
            metavar="WHEN",
            help="Backfill: the last window or fire to run (default: now).",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="Run again the windows that already succeeded.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            job = backfills.target(options["job"])
            keys = self._keys(job, options["start"], options["end"])
        except (UnknownJob, ValueError) as error:
            raise CommandError(error) from error
        verbosity = options["verbosity"]
        try:
            tally = backfills.run_windows(
                job,
                keys,
                force=options["force"],
                verbosity=verbosity,
                say=self.stdout.write,
                stdout=self.stdout,
                stderr=self.stderr,
            )
        except backfills.WindowFailed as failed:
            raise CommandError(
                f"{job.name} failed in {failed} (its traceback is on its claim), so no later "
                "window was run; run the same command again to retry it and go on: the "
                "windows that succeeded are skipped"
            ) from failed
        if verbosity:
            self._report(job, keys, tally)

    def _keys(self, job: backfills.Target, start: Any, end: Any) -> list[str]:
        if start is None and end is None:
            return [backfills.current_key(job)]
        if start is None:
            raise ValueError("--to needs --from: give the first window of the range too")
        return backfills.keys_between(job, start, end)

    def _report(self, job: backfills.Target, keys: list[str], tally: backfills.Tally) -> None:
        if tally.paused is not None:
            self.stdout.write(
                f"Stopped before {job.name} {tally.paused.window}: {tally.paused}; "
                f"resume it with manage.py jobclaims_resume {job.name}, then run this again."
            )
        for key, refusal in tally.skipped:
            self.stdout.write(f"Skipped {job.name} {key}: {refusal}.")
        if len(keys) > 1:
            self.stdout.write(
                f"{job.name}: {len(tally.ran)} of {len(keys)} windows ran here, "
                f"{len(tally.skipped)} were held or done elsewhere."
            )
