from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
from typing import TYPE_CHECKING, Any, NoReturn, cast

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from jobclaims.checks import check_schedules
from jobclaims.claims import naming
from jobclaims.claims.rule import State
from jobclaims.conf import jobclaims_settings
from jobclaims.jobs.discovery import every_schedule, known_jobs
from jobclaims.management.base import OperatorCommand
from jobclaims.models import JobPause, JobRun, JobTag, SchedulerSeen
from jobclaims.monitoring import bounded
from jobclaims.monitoring.health import (
    GoneJob,
    Health,
    JobHealth,
    checked_overview,
    missed_windows,
    read_health,
)
from jobclaims.monitoring.overview import JobOverview, as_document, describe
from jobclaims.time import durations
from jobclaims.time.clock import database_now

if TYPE_CHECKING:
    from jobclaims.models import ListedRun

#: ``--check``'s exit status when a job is unhealthy: CRITICAL to Nagios.
UNHEALTHY = 2
#: ``--check``'s exit status when health cannot be told: UNKNOWN to Nagios
#: (the claims database did not answer, or ``--job`` names no known job).
UNKNOWN = 3
#: The most ``--limit`` may be: more rows than any database's LIMIT takes.
MOST_SHOWN = 2**31 - 1
#: Columns that give up characters for the table to fit, in this order (the
#: owner says least about which claim a row is), and the fewest each keeps.
_SHRINKABLE = {"OWNER": 12, "JOB": 12, "WINDOW": 16}


def _count(text: str) -> int:
    """argparse type for ``--limit``: a whole number, 0 for no limit."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; pass 0 for no limit")
    if int(text) > MOST_SHOWN:
        raise argparse.ArgumentTypeError(
            f"{text} is more claims than can be shown (at most {MOST_SHOWN}); pass 0 for no limit"
        )
    return int(text)


class Command(OperatorCommand):
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
        parser.add_argument(
            "--job",
            action="append",
            metavar="JOB",
            help="Only claims of this job; with --check, repeat it to check several.",
        )
        parser.add_argument(
            "--limit",
            type=_count,
            default=50,
            metavar="N",
            help="Show the newest N claims (default: 50; 0 shows all).",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="Write JSON for scripts, not a table (with --check, the verdict).",
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
                "Only list the unhealthy jobs and what is wrong with each, and exit "
                f"{UNHEALTHY} when there are any, {UNKNOWN} when health cannot be told (an "
                "option error included): for monitors, and a cron line of its own."
            ),
        )
        parser.add_argument(
            "--output",
            action="store_true",
            help=(
                "Also show what each claim's run printed (the end of its stdout and stderr), "
                "after the table; with --job J --limit 1, the job's last run's."
            ),
        )
        parser.add_argument(
            "--schedules",
            action="store_true",
            help="Also show each scheduled job: schedule, next fires, last run, missed fires.",
        )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # A monitor reads an exit status of 2 as CRITICAL: a typo in its own
        # command line is UNKNOWN, as Nagios' plugins exit on a usage error.
        parser.error = functools.partial(_usage_error, parser)  # type: ignore[method-assign]
        return parser

    def execute(self, *args: Any, **options: Any) -> str | None:
        # A monitor's output is the jobs' health alone: the deployment's
        # warnings (W001 on SQLite) belong to manage.py check, and cron
        # would mail them on every call.
        if options.get("check"):
            options["skip_checks"] = True
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        jobs: list[str] = options["job"] or []
        if options["check"]:
            self._check(jobs, options["verbosity"], options["json"])
            return
        if len(jobs) > 1:
            raise CommandError(
                f"Error: --job may be given once without --check, not {len(jobs)} times",
                returncode=UNKNOWN,
            )
        job = jobs[0] if jobs else None
        runs = JobRun.objects.listing(state=options["state"], job=job).with_skips()
        if not options["output"]:
            runs = runs.defer("output")  # Up to OUTPUT_KEPT bytes a row, read only when shown.
        # The cast names what listing() and with_skips() annotated, which
        # django-stubs does not carry through JobRunQuerySet's own methods.
        shown = cast(
            "list[ListedRun]", list(runs[: options["limit"]] if options["limit"] else runs)
        )
        now = database_now(jobclaims_settings.claims_database(JobRun))
        missed = _missed(job) if options["missed"] else {}
        views = _overviews(job, now) if options["schedules"] else []
        gone = read_health(job).gone
        paused = _pauses(job)
        if options["json"]:
            document = _document(shown, now)
            document["pauses"] = [
                {
                    "job": pause.job,
                    "paused_by": pause.paused_by,
                    "paused_at": pause.paused_at.isoformat(),
                    "until": pause.until.isoformat() if pause.until else None,
                    "reason": pause.reason,
                }
                for pause in paused
            ]
            if options["output"]:
                for claim, run in zip(document["claims"], shown, strict=True):
                    claim["output"] = run.output
            if options["missed"]:
                document["missed_windows"] = missed
            if options["schedules"]:
                document["schedules"] = [as_document(view) for view in views]
            document["schedulers"] = _schedulers_document(now)
            document["gone_jobs"] = [_gone_document(each) for each in gone]
            self.stdout.write(json.dumps(document, indent=2))
            return
        if not shown:
            self.stdout.write("No claims match.")
        else:
            self.stdout.write("\n".join(_table(shown, now, self._width())))
        if options["limit"] and len(shown) == options["limit"]:
            self.stdout.write(f"Newest {len(shown)} of {runs.count()} claims; --limit 0 shows all.")
        counts = JobRun.objects.running_counts()
        self.stdout.write(f"{counts['active']} active, {counts['expired']} expired.")
        for pause in paused:
            self.stdout.write(_paused(pause, now))
        for line in _schedulers(now):
            self.stdout.write(line)
        for each in gone:
            self.stdout.write(f"{each.job}: {each.said}")
        for job, windows in missed.items():
            self.stdout.write(f"{job}: {len(windows)} missed windows: {', '.join(windows)}")
        for view in views:
            self.stdout.write(describe(view))
        if options["output"]:
            for run in shown:
                self.stdout.write(_printed(run))

    def _width(self) -> int | None:
        """How wide the table may be: the terminal's, as ``ps`` fits it;
        without one, as wide as its rows, so that a name piped to ``grep``
        or a file is whole."""
        if not self.stdout.isatty():
            return None
        return shutil.get_terminal_size().columns

    def _check(self, jobs: list[str], verbosity: int, as_json: bool) -> None:
        """Say what is wrong with each job (``jobs``, or every known one), and
        exit by Nagios' codes: 0 healthy, 2 unhealthy, 3 cannot tell."""
        try:
            health, known = bounded.within(lambda: _checked(jobs))
        except DatabaseError as error:
            summary = str(error).strip().partition("\n")[0]
            self._json(as_json, {"status": "unknown", "error": summary})
            raise CommandError(
                f"UNKNOWN: the claims database did not answer: {summary}", returncode=UNKNOWN
            ) from error
        unknown = [
            job for job in dict.fromkeys(jobs) if job not in {each.job for each in health.jobs}
        ]
        if unknown:
            names = ", ".join(repr(job) for job in unknown)
            verb = "is not a known job" if len(unknown) == 1 else "are not known jobs"
            said = f"{names} {verb}; the known jobs are: {', '.join(known) or 'none'}"
            self._json(as_json, {"status": "unknown", "error": said})
            raise CommandError(f"UNKNOWN: {said}", returncode=UNKNOWN)
        unhealthy = [each for each in health.jobs if not each.healthy]
        # Each names its job: "nightly: schedule '61 * * * *' is not …".
        unusable = [error.msg for error in check_schedules()]
        self._json(
            as_json,
            {
                "status": "unhealthy" if unhealthy or unusable else "healthy",
                "jobs": [
                    {
                        "job": each.job,
                        "healthy": each.healthy,
                        "problems": each.kinds,
                        "said": each.problems,
                    }
                    for each in health.jobs
                ],
                "unusable_schedules": unusable,
                "gone_jobs": [_gone_document(each) for each in health.gone],
            },
        )
        if not as_json:
            for each in unhealthy:
                for problem in each.problems:
                    self.stdout.write(f"{each.job}: {problem}")
            for problem in unusable:
                self.stdout.write(f"{problem} (jobclaims.W005)")
        if unhealthy or unusable:
            total = len(health.jobs) + len(unusable)
            raise CommandError(
                f"{len(unhealthy) + len(unusable)} of {_jobs(total)} unhealthy",
                returncode=UNHEALTHY,
            )
        if verbosity and not as_json:
            gone = "".join(f"; {each.job} is gone from the code" for each in health.gone)
            self.stdout.write(f"{_all_healthy(health.jobs)}{gone}.")

    def _json(self, as_json: bool, document: dict[str, Any]) -> None:
        """With ``--json``, the verdict for scripts on standard output; the
        exit status and the line on standard error are the text's."""
        if as_json:
            self.stdout.write(json.dumps(document, indent=2))


def _checked(jobs: list[str]) -> tuple[Health, list[str]]:
    """The health ``--check`` judges, and the known jobs when a job asked
    for has none (for the message): every read of the check, bounded together."""
    health = read_health(jobs or None)
    asked = set(jobs) - {each.job for each in health.jobs}
    return health, known_jobs() if asked else []


def _all_healthy(jobs: list[JobHealth]) -> str:
    if not jobs:
        return "No job is known yet"
    if len(jobs) == 1:
        return f"{jobs[0].job} is healthy"
    return f"All {len(jobs)} jobs healthy"


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def _usage_error(parser: CommandParser, message: str) -> NoReturn:
    """argparse's usage error, ending with UNKNOWN's status instead of 2."""
    if not parser.called_from_command_line:
        raise CommandError(f"Error: {message}", returncode=UNKNOWN)
    parser.print_usage(sys.stderr)
    parser.exit(UNKNOWN, f"{parser.prog}: error: {message}\n")


def _gone_document(each: GoneJob) -> dict[str, str]:
    return {
        "job": each.job,
        "schedule": each.schedule,
        "last_claimed_at": each.last_claimed.isoformat(),
    }


def _pauses(job: str | None) -> list[JobPause]:
    """The pauses in force, oldest first: of ``job``, of the job its
    schedule belongs to, of that job's tags and of all jobs, if given,
    since each holds it."""
    pauses = JobPause.objects.in_force().order_by("paused_at", "pk")
    if job is None:
        return list(pauses)
    holding = naming.pausing_jobs(job)
    tags = JobTag.objects.filter(job=holding["parent_job"]).values_list("tag", flat=True)
    return list(pauses.filter(job__in={job, *holding.values(), *tags}))


def _paused(pause: JobPause, now: Any) -> str:
    """A pause in force, in a line: whose, since when, until when, why."""
    whose = "all jobs" if pause.job == naming.ALL_JOBS else pause.job
    line = f"Paused: {whose}, by {pause.paused_by} {durations.relative(pause.paused_at, now)}"
    line += f", until {durations.relative(pause.until, now)}" if pause.until else ""
    return f"{line} ({pause.reason})." if pause.reason else f"{line}."


def _printed(run: JobRun) -> str:
    """A run's output, under a line that names the run."""
    if run.output is None:
        why = "it runs still, was killed, or ran through claim() or a task"
        return f"== {run.job} {run.window}: no output kept ({why})"
    if not run.output:
        return f"== {run.job} {run.window} printed nothing"
    return f"== {run.job} {run.window} printed:\n{run.output.rstrip()}"


def _schedulers(now: Any) -> list[str]:
    """A line per scheduler seen: where it runs, whether it is live, and the
    jobs its schedules start ("of", not "running": a stopped one runs none)."""
    lines = []
    for row in SchedulerSeen.objects.order_by("host", "pid", "started_at"):
        live = "live" if row.live_at(now) else "stopped" if row.stopped_at else "gone"
        lines.append(
            f"Scheduler {row} ({live}): seen {durations.relative(row.last_seen_at, now)}, "
            f"schedules {row.fingerprint} of {', '.join(sorted(row.schedules)) or 'no job'}"
        )
    return lines


def _schedulers_document(now: Any) -> list[dict[str, Any]]:
    return [
        {
            "host": row.host,
            "pid": row.pid,
            "live": row.live_at(now),
            "started_at": row.started_at.isoformat(),
            "last_seen_at": row.last_seen_at.isoformat(),
            "stopped_at": row.stopped_at and row.stopped_at.isoformat(),
            "fingerprint": row.fingerprint,
            "schedules": row.schedules,
        }
        for row in SchedulerSeen.objects.order_by("host", "pid", "started_at")
    ]


def _overviews(job: str | None, now: Any) -> list[JobOverview]:
    """The overview of each scheduled job (of ``job`` alone, if given)."""
    return [
        checked_overview(each, now)
        for each in every_schedule()[0]
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


def _table(runs: list[ListedRun], now: Any, width: int | None) -> list[str]:
    """Left-aligned columns two spaces apart, cut with "…" to fit ``width``
    (``None``: nothing is cut).

    A cell is cut where the rows' values differ (``_cut()``): two claims of
    one job's two schedules, or of two windows, never read alike. Rows that
    cannot be told apart within ``width`` make the table wider instead.
    """
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
    columns = {name: [row[i] for row in rows[1:]] for i, name in enumerate(header)}
    widths = {name: max(len(row[i]) for row in rows) for i, name in enumerate(header)}
    excess = 0 if width is None else sum(widths.values()) + 2 * (len(header) - 1) - width
    for name, least in _SHRINKABLE.items():
        while (
            excess > 0
            and widths[name] > least
            and _cut(columns[name], widths[name] - 1) is not None
        ):
            widths[name] -= 1
            excess -= 1
    shown = {name: _cut(values, widths[name]) or values for name, values in columns.items()}
    lines = ["  ".join(name.ljust(widths[name]) for name in header).rstrip()]
    for index in range(len(runs)):
        cells = (shown[name][index].ljust(widths[name]) for name in header)
        lines.append("  ".join(cells).rstrip())
    return lines


def _cut(values: list[str], width: int) -> list[str] | None:
    """``values`` cut to ``width`` with "…" in their middle, or as near it
    as keeps values that differ reading differently (a job's schedules
    differ at their end, windows in their middle); None if no cut does."""
    if all(len(value) <= width for value in values):
        return values
    kept = width - 1
    distinct = len(set(values))
    middle = kept - kept // 2
    for head in sorted(range(kept + 1), key=lambda head: abs(head - middle)):
        cut = [
            value if len(value) <= width else value[:head] + "…" + value[len(value) - kept + head :]
            for value in values
        ]
        if len(set(cut)) == distinct:
            return cut
    return None
