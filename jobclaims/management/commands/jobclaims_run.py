from __future__ import annotations

import argparse
import datetime
import shlex
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from jobclaims.controls import backfills
from jobclaims.exceptions import JobInterrupted, UnknownJob
from jobclaims.jobs.claiming import claim_failure
from jobclaims.jobs.commands import paused_and_how_to_resume
from jobclaims.time import wall_times


def when(text: str) -> str:
    """argparse type for ``--from`` and ``--to``: an ISO 8601 date or
    date-time, kept as written, to be read in the job's zone once the job
    is known (``Slots.moment()``)."""
    try:
        wall_times.parse(text, datetime.timezone.utc)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}, like 2026-12-02T06:00") from None
    return text


def window_count(text: str) -> int:
    """argparse type for ``--max-windows``: a whole number above 0."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"give a whole number of windows above 0, not {text!r}")
    return int(text)


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
            type=when,
            metavar="WHEN",
            help=(
                "Backfill: the first window or fire to run (a date or date-time, in the "
                "job's time zone, as --window is, unless it has an offset)."
            ),
        )
        parser.add_argument(
            "--to",
            dest="end",
            type=when,
            metavar="WHEN",
            help="Backfill: the last window or fire to run (default: now).",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="Run again the windows that already succeeded.",
        )
        parser.add_argument(
            "--max-windows",
            type=window_count,
            default=backfills.MAX_WINDOWS,
            metavar="N",
            help=(
                "Backfill: refuse a range of more windows than this, before running any "
                f"(default: {backfills.MAX_WINDOWS})."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self._run(options)
        except DatabaseError as error:
            # A database that cannot be reached, or times out, before a
            # window's claim: one line, as a job's own command says it.
            raise CommandError(claim_failure(options["job"], None, error)) from error

    def _run(self, options: dict[str, Any]) -> None:
        """Run the job's current window, or each of the range's, and say how it went."""
        try:
            job = backfills.target(options["job"])
            keys = self._keys(job, options)
        except backfills.TooManyWindows as too_many:
            raise CommandError(self._in_parts(job, options, too_many)) from too_many
        except (UnknownJob, ValueError) as error:
            raise CommandError(error) from error
        verbosity = options["verbosity"]
        tally = backfills.run_windows(
            job,
            keys,
            force=options["force"],
            verbosity=verbosity,
            say=self.stdout.write,
            stdout=self.stdout,
            stderr=self.stderr,
        )
        if verbosity:
            self._report(job, keys, tally)
        stopped = tally.stopped
        if isinstance(stopped, backfills.WindowFailed):
            raise CommandError(
                f"{job.name} failed in {stopped} (its traceback is on its claim), so no later "
                "window was run; run the same command again to retry it and go on: the "
                "windows that succeeded are skipped"
            ) from stopped
        if isinstance(stopped, JobInterrupted):
            raise CommandError(
                f"{job.name}: {stopped} between two windows, so no later window was run; "
                "run the same command again to go on: the windows that succeeded are skipped",
                returncode=128 + stopped.signum,
            ) from stopped
        if stopped is not None:
            raise stopped

    def _keys(self, job: backfills.Target, options: dict[str, Any]) -> list[str]:
        start, end = options["start"], options["end"]
        if start is None and end is None:
            return [backfills.current_key(job)]
        if start is None:
            raise ValueError("--to needs --from: give the first window of the range too")
        return backfills.keys_between(
            job,
            job.slots.moment(start),
            None if end is None else job.slots.moment(end),
            limit=options["max_windows"],
        )

    def _in_parts(
        self, job: backfills.Target, options: dict[str, Any], too_many: backfills.TooManyWindows
    ) -> str:
        """Why a range too long was refused, and the commands that run it in parts."""
        extra = " --force" if options["force"] else ""
        if options["max_windows"] != backfills.MAX_WINDOWS:
            extra += f" --max-windows {options['max_windows']}"
        run = f"manage.py jobclaims_run {shlex.quote(job.name)}"
        end = "" if options["end"] is None else f" --to {shlex.quote(options['end'])}"
        return (
            f"{job.name} has more than {too_many.limit} windows from {options['start']} to "
            f"{options['end'] or 'now'}, so none was run; run the first {too_many.limit} "
            f"with {run} --from {shlex.quote(options['start'])} "
            f"--to {too_many.through.isoformat()}{extra}, then the rest with {run} "
            f"--from {too_many.rest.isoformat()}{end}{extra}; or pass a larger "
            "--max-windows to run more in one go"
        )

    def _report(self, job: backfills.Target, keys: list[str], tally: backfills.Tally) -> None:
        if tally.paused is not None:
            self.stdout.write(
                f"Stopped before {job.name} {tally.paused.window}: "
                f"{paused_and_how_to_resume(tally.paused)}, then run this again."
            )
        for key, refusal in tally.skipped:
            self.stdout.write(f"Skipped {job.name} {key}: {refusal}.")
        if len(keys) > 1 or tally.stopped is not None:
            self.stdout.write(_summary(job, keys, tally))


def _summary(job: backfills.Target, keys: list[str], tally: backfills.Tally) -> str:
    """What the range did with its windows, in one line: each window is
    counted once, as run here, done before, held by another run, or not
    reached."""
    said = f"{job.name}: {len(tally.ran)} of {len(keys)} windows ran here"
    if done := len(tally.done_before):
        said += f"; {done} had succeeded already (--force runs them again)"
    if held := len(tally.held):
        said += f"; {held} {'was' if held == 1 else 'were'} held by another run"
    if left := len(keys) - len(tally.ran) - len(tally.skipped):
        said += f"; {left} not run, as {_why_stopped(tally)}"
    return said + "."


def _why_stopped(tally: backfills.Tally) -> str:
    if tally.paused is not None:
        note = tally.paused.paused
        everyone = note is not None and note.of_all_jobs
        return "all jobs are paused" if everyone else "the job is paused"
    stopped = tally.stopped
    if isinstance(stopped, JobInterrupted):
        return f"{signal.Signals(stopped.signum).name} stopped the range"
    if isinstance(stopped, backfills.WindowFailed):
        return f"{stopped.key} failed"
    if isinstance(stopped, CommandError) and stopped.returncode > 128:
        return f"{signal.Signals(stopped.returncode - 128).name} stopped a window's run"
    return "a window's run was stopped"
