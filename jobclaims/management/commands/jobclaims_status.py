from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from jobclaims import durations
from jobclaims.checks import check_schedules
from jobclaims.claims.rule import State
from jobclaims.clock import database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.health import checked_overview, known_jobs, missed_windows, read_health
from jobclaims.job_discovery import scheduled_jobs
from jobclaims.models import JobRun, SchedulerSeen
from jobclaims.overview import JobOverview
from jobclaims.overview_output import as_document, describe

if TYPE_CHECKING:
    from jobclaims.models import ListedRun

#: ``--check``'s exit status when a job is unhealthy: CRITICAL to Nagios.
UNHEALTHY = 2
#: ``--check``'s exit status when health cannot be told: UNKNOWN to Nagios
#: (the claims database did not answer, or ``--job`` names no known job).
UNKNOWN = 3
#: The most ``--limit`` may be: more rows than any database's LIMIT takes.
MOST_SHOWN = 2**31 - 1
#: The table fits a terminal this wide.
WIDTH = 80
#: Columns that give up characters, widest first, for the table to fit, and
#: the fewest characters each keeps.
_SHRINKABLE = {"JOB": 12, "WINDOW": 16, "OWNER": 12}


def _count(text: str) -> int:
    """argparse type for ``--limit``: a whole number, 0 for no limit."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; pass 0 for no limit")
    if int(text) > MOST_SHOWN:
        raise argparse.ArgumentTypeError(
            f"{text} is more claims than can be shown (at most {MOST_SHOWN}); pass 0 for no limit"
        )
    return int(text)


class Command(BaseCommand):
    help = (
        "Show claims, newest first, as active, expired, succeeded or failed by "
        "the database's clock, with how many instances skipped each, and "
        "optionally the windows no instance claimed; it can run from cron."
    )
    # A monitor must still answer when a job's code fails a system check:
    # --check reports a schedule that cannot work as an unhealthy job instead.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--state", choices=State.values, help="Only claims in this state.")
        parser.add_argument("--job", help="Only claims of this job.")
        parser.add_argument(
            "--limit",
            type=_count,
            default=50,
            metavar="N",
            help="Show the newest N claims (default: 50; 0 shows all).",
        )
        parser.add_argument(
            "--json", action="store_true", help="Write JSON for scripts, not a table."
        )
        parser.add_argument(
            "--missed",
            action="store_true",
            help="Also list the windows no instance claimed, per job (with --job, of that job).",
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help=(
                "Only list the unhealthy jobs (overdue, failed, or with a dead holder), and "
                f"exit {UNHEALTHY} when there are any: for monitors, and a cron line of its own."
            ),
        )
        parser.add_argument(
            "--schedules",
            action="store_true",
            help="Also show each scheduled job: schedule, next fires, last run, missed fires.",
        )

    def execute(self, *args: Any, **options: Any) -> str | None:
        # A monitor's output is the jobs' health alone: the deployment's
        # warnings (W001 on SQLite) belong to manage.py check, and cron
        # would mail them on every call.
        if options.get("check"):
            options["skip_checks"] = True
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["check"]:
            self._check(options["job"], options["verbosity"])
            return
        runs = JobRun.objects.listing(state=options["state"], job=options["job"]).with_skips()
        # The cast names what listing() and with_skips() annotated, which
        # django-stubs does not carry through JobRunQuerySet's own methods.
        shown = cast(
            "list[ListedRun]", list(runs[: options["limit"]] if options["limit"] else runs)
        )
        now = database_now(jobclaims_settings.claims_database(JobRun))
        missed = _missed(options["job"]) if options["missed"] else {}
        views = _overviews(options["job"], now) if options["schedules"] else []
        gone = read_health(options["job"]).gone
        if options["json"]:
            document = _document(shown, now)
            if options["missed"]:
                document["missed_windows"] = missed
            if options["schedules"]:
                document["schedules"] = [as_document(view) for view in views]
            document["schedulers"] = _schedulers_document(now)
            document["gone_jobs"] = [
                {
                    "job": each.job,
                    "schedule": each.schedule,
                    "last_claimed_at": each.last_claimed.isoformat(),
                }
                for each in gone
            ]
            self.stdout.write(json.dumps(document, indent=2))
            return
        if not shown:
            self.stdout.write("No claims match.")
        else:
            self.stdout.write("\n".join(_table(shown, now)))
        if options["limit"] and len(shown) == options["limit"]:
            self.stdout.write(f"Newest {len(shown)} of {runs.count()} claims; --limit 0 shows all.")
        counts = JobRun.objects.running_counts()
        self.stdout.write(f"{counts['active']} active, {counts['expired']} expired.")
        for line in _schedulers(now):
            self.stdout.write(line)
        for each in gone:
            self.stdout.write(f"{each.job}: {each.said}")
        for job, windows in missed.items():
            self.stdout.write(f"{job}: {len(windows)} missed windows: {', '.join(windows)}")
        for view in views:
            self.stdout.write(describe(view))

    def _check(self, job: str | None, verbosity: int) -> None:
        try:
            health = read_health(job)
            known = [] if health.jobs or job is None else known_jobs()
        except DatabaseError as error:
            summary = str(error).strip().partition("\n")[0]
            raise CommandError(
                f"UNKNOWN: the claims database did not answer: {summary}", returncode=UNKNOWN
            ) from error
        if job is not None and not health.jobs:
            raise CommandError(
                f"UNKNOWN: {job!r} is not a known job; the known jobs are: "
                f"{', '.join(known) or 'none'}",
                returncode=UNKNOWN,
            )
        jobs = health.jobs
        unhealthy = [each for each in jobs if not each.healthy]
        for each in unhealthy:
            for problem in each.problems:
                self.stdout.write(f"{each.job}: {problem}")
        # Each names its job: "nightly: schedule '61 * * * *' is not …".
        unusable = [error.msg for error in check_schedules()]
        for problem in unusable:
            self.stdout.write(f"{problem} (jobclaims.W005)")
        if unhealthy or unusable:
            raise CommandError(
                f"{len(unhealthy) + len(unusable)} of {len(jobs) + len(unusable)} jobs unhealthy",
                returncode=UNHEALTHY,
            )
        if verbosity:
            gone = "".join(f"; {each.job} is gone from the code" for each in health.gone)
            self.stdout.write(f"All {len(jobs)} jobs healthy{gone}.")


def _schedulers(now: Any) -> list[str]:
    """A line per scheduler seen: where it runs, whether it is live, what it runs."""
    grace = jobclaims_settings.scheduler_grace
    lines = []
    for row in SchedulerSeen.objects.order_by("host", "pid", "started_at"):
        live = "live" if row.last_seen_at >= now - grace else "gone"
        lines.append(
            f"Scheduler {row} ({live}): seen {durations.relative(row.last_seen_at, now)}, "
            f"schedules {row.fingerprint}, running {', '.join(sorted(row.schedules)) or 'nothing'}"
        )
    return lines


def _schedulers_document(now: Any) -> list[dict[str, Any]]:
    grace = jobclaims_settings.scheduler_grace
    return [
        {
            "host": row.host,
            "pid": row.pid,
            "live": row.last_seen_at >= now - grace,
            "started_at": row.started_at.isoformat(),
            "last_seen_at": row.last_seen_at.isoformat(),
            "fingerprint": row.fingerprint,
            "schedules": row.schedules,
        }
        for row in SchedulerSeen.objects.order_by("host", "pid", "started_at")
    ]


def _overviews(job: str | None, now: Any) -> list[JobOverview]:
    """The overview of each scheduled job (of ``job`` alone, if given)."""
    return [
        checked_overview(each, now)
        for each in scheduled_jobs()
        if job in (None, each.job, each.command)
    ]


def _missed(job: str | None) -> dict[str, list[str]]:
    """Each job's windows that no instance claimed (jobs with none left out)."""
    jobs = [job] if job else JobRun.objects.order_by().values_list("job", flat=True).distinct()
    found = {name: missed_windows(name) for name in jobs}
    return {name: windows for name, windows in found.items() if windows}


def _document(runs: list[ListedRun], now: Any) -> dict[str, Any]:
    def moment(value: Any) -> str | None:
        return value.isoformat() if value else None

    return {
        "now": moment(now),
        "claims": [
            {
                "job": run.job,
                "window": run.window,
                "state": run.state,
                "owner": run.owner,
                "attempt": run.attempt,
                "failures": run.failures,
                "retry_at": moment(run.retry_at),
                "skips": run.skips,
                "last_skipped_at": moment(run.last_skipped_at),
                "claimed_at": moment(run.claimed_at),
                "expires_at": moment(run.expires_at),
                "finished_at": moment(run.finished_at),
            }
            for run in runs
        ],
    }


def _table(runs: list[ListedRun], now: Any) -> list[str]:
    """Left-aligned columns two spaces apart, cut with "…" to fit ``WIDTH``."""
    header = ("JOB", "WINDOW", "STATE", "TRY", "SKIPS", "END", "OWNER")
    rows = [header] + [
        (
            run.job,
            run.window,
            run.state,
            str(run.attempt),
            str(run.skips),
            durations.relative(run.finished_at or run.expires_at, now),
            # Host and pid say where to look; the random id is for machines.
            run.owner.rpartition(":")[0] or run.owner,
        )
        for run in runs
    ]
    widths = {name: max(len(row[i]) for row in rows) for i, name in enumerate(header)}
    excess = sum(widths.values()) + 2 * (len(header) - 1) - WIDTH
    while excess > 0:
        wide = [name for name, least in _SHRINKABLE.items() if widths[name] > least]
        if not wide:
            break
        widths[max(wide, key=widths.__getitem__)] -= 1
        excess -= 1
    return [
        "  ".join(_fit(cell, widths[name]) for name, cell in zip(header, row, strict=True)).rstrip()
        for row in rows
    ]


def _fit(cell: str, width: int) -> str:
    return cell.ljust(width) if len(cell) <= width else cell[: width - 1] + "…"
