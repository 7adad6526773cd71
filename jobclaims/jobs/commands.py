"""The management-command base class that scheduled jobs subclass."""

from __future__ import annotations

import argparse
import datetime
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from jobclaims.claims import naming, retries
from jobclaims.claims.rule import PauseNote, Reason, Refusal
from jobclaims.conf import jobclaims_settings, monitor_problem
from jobclaims.exceptions import (
    ClaimLost,
    JobCancelled,
    JobInterrupted,
    JobTimedOut,
    LeaseLapsed,
    StandbyTimeout,
)
from jobclaims.jobs.claiming import (
    claim_failure,
    claim_waiting,
    slot_key,
    validate_max_run_time,
)
from jobclaims.jobs.schedules import JobSchedule, Overlap, Schedule
from jobclaims.models import JobRun
from jobclaims.running import timeouts
from jobclaims.running.cancels import cancellation
from jobclaims.running.checkins import Cadence, CheckIns, monitors_for
from jobclaims.running.children import adopt, use_parents_databases
from jobclaims.running.heartbeat import lease_deadline
from jobclaims.running.holding import holding
from jobclaims.running.output import Tail, capturing_process, teeing
from jobclaims.running.stopping import (
    HeldBackOnceReturned,
    SelfStop,
    interrupting_on_stop_signals,
)
from jobclaims.time import leases, windows
from jobclaims.time.slots import Slots

__all__ = ["JobCommand", "Schedule"]

#: The exit status of a run stopped at its timeout, as timeout(1) exits.
TIMED_OUT_STATUS = 124
#: The longest tag (``JobCommand.tags``), as ``JobTag`` stores it after its mark.
TAG_LENGTH = 100
TAG_PATTERN = re.compile(rf"[\w.-]{{1,{TAG_LENGTH}}}")

#: True while a job's command runs the system checks, which leave out
#: jobclaims.W001 then (``JobCommand.check()``).
checking_a_job_run: ContextVar[bool] = ContextVar("jobclaims_checking_a_job_run", default=False)
#: The command of the job whose run runs the system checks, if one does:
#: jobclaims.E010 tells it only of the names it shares itself.
job_checked: ContextVar[str | None] = ContextVar("jobclaims_job_checked", default=None)


def check_a_job_run(
    check: Callable[..., None], *args: Any, command: str | None = None, **kwargs: Any
) -> None:
    """Run ``check`` (a command's ``BaseCommand.check``) as a job's run needs it.

    Only the checks that read code: the deployment's (jobclaims.W007 and
    W008, and the database's own, which Django 6.1 runs for every command
    unless told which databases) are ``manage.py check``'s and
    ``migrate``'s. A run from cron need not mail them every time, and must
    not open a connection before its claim: with the database down, that
    claim says so in one line, where a check would print a traceback.
    ``command`` is the job's, when the run is a job's: another job's
    mistake is not its own.
    """
    token = checking_a_job_run.set(True)
    named = job_checked.set(command)
    try:
        check(*args, **{"databases": [], **kwargs})
    finally:
        job_checked.reset(named)
        checking_a_job_run.reset(token)


def positive_seconds(text: str) -> datetime.timedelta:
    """argparse type for ``--lease``: a positive number of seconds, up to ``MAX_LEASE``.

    Bounded before it becomes a ``timedelta``, which overflows on ``inf``.
    """
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    longest = leases.MAX_LEASE
    if seconds > longest.total_seconds():
        raise argparse.ArgumentTypeError(
            f"the lease must be at most {longest.total_seconds():.0f} seconds "
            f"({longest.days} days), not {text}; {leases.ADVICE}"
        )
    # Also refuses NaN, and what rounds to no time at all (1e-9).
    if not seconds > 0 or not (lease := datetime.timedelta(seconds=seconds)):
        raise argparse.ArgumentTypeError(f"the lease must be above 0 seconds, not {text}")
    if problem := leases.problem(lease):
        raise argparse.ArgumentTypeError(f"the lease {problem}")
    return lease


def wait_seconds(text: str) -> datetime.timedelta:
    """argparse type for ``--wait``: a positive, finite number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds < leases.MAX_LEASE.total_seconds():
        raise argparse.ArgumentTypeError(
            f"the wait must be above 0 seconds and below {leases.MAX_LEASE.days} days, not {text}"
        )
    return datetime.timedelta(seconds=seconds)


class JobCommand(BaseCommand):
    """A management command that runs at most once per window, on one host.

    ``handle()`` claims the job's current window, calls ``run_job()`` outside
    any transaction, and records the outcome on the claim:

    - claimed: ``run_job()`` runs; the claim is recorded ``succeeded``, or
      ``failed`` with the traceback if it raised (exit status 1).
    - held by another instance, or the window already succeeded: the command
      says who holds it until when, and exits 0. Skipping is normal.

    While ``run_job()`` runs, a heartbeat renews the lease every third of it
    (up to ``max_run_time``, if set), and SIGTERM or SIGINT record the claim
    failed ("interrupted") so the next instance need not wait out the lease.
    A run past ``timeout`` is stopped and recorded timed out
    (``jobclaims.running.timeouts``); a run an operator cancelled is stopped and
    stays recorded cancelled (``jobclaims.running.cancels``).
    A job that writes to the claim's database can make each write conditional
    on still holding the claim with ``with run.fenced():``.

    Subclasses implement ``run_job()`` and may set the class attributes.
    """

    #: Name the claims are recorded under; defaults to the command's own name.
    job_name: str | None = None
    #: The slot a run belongs to: a calendar name ("minutely", "hourly",
    #: "daily", "weekly", "monthly", in TIME_ZONE) or a timedelta bucket.
    window: windows.WindowSpec = "minutely"
    #: How long a claim lasts before a crashed run's window can be taken over;
    #: renewed while the job runs. None: JOBCLAIMS["DEFAULT_LEASE"] (10 minutes).
    lease: datetime.timedelta | None = None
    #: Let a run start while another window's run of this job still holds it.
    allow_overlap: bool = False
    #: What ``jobclaims_scheduler`` does with a fire whose run would overlap
    #: the job's run of an earlier fire: "skip" it (the default), "allow" it
    #: (``allow_overlap``), "buffer" it until that run ends (one fire waits
    #: at most), or "replace" that run (cancelled) with it. None: "allow" with
    #: ``allow_overlap``, else "skip". A ``Schedule`` may have its own.
    overlap: str | None = None
    #: Stop renewing the lease this long after the claim, so a run that hangs
    #: loses its window to the next instance; None: renew for as long as it runs.
    max_run_time: datetime.timedelta | None = None
    #: A cron expression in TIME_ZONE (``"5 2 * * *"``): each fire time is a
    #: window, and ``jobclaims_scheduler`` starts the job at each. None: the
    #: job is started by your own cron, and ``window`` cuts its windows.
    schedule: str | None = None
    #: Several schedules, each with its own arguments and zone, instead of
    #: ``schedule``: ``[Schedule("0 * * * *", args=["--region", "eu"]), ...]``.
    #: Each claims its own fires (``jobclaims.claims.naming``).
    schedules: Sequence[Schedule] = ()
    #: The zone the schedules are read in ("America/New_York"); None: TIME_ZONE.
    time_zone: str | None = None
    #: Start each fire a random moment up to this long after its claim, so
    #: that many jobs due at one time do not start at once; None: at once.
    jitter: datetime.timedelta | None = None
    #: What a scheduler that comes back does with fires no scheduler was up
    #: for: "skip", "latest" (run the most recent once) or "all" (each in order).
    misfire: str = "latest"
    #: With misfire = "latest": run the most recent missed fire only if it is
    #: no older than this. None: at any age.
    misfire_deadline: datetime.timedelta | None = None
    #: How many times ``jobclaims_scheduler`` runs a fire again after it
    #: failed or its process died (docs/howto/retries.md); cron does not.
    retries: int = 0
    #: The wait before the first retry, doubled for each next one, with jitter.
    retry_backoff: datetime.timedelta = datetime.timedelta(seconds=10)
    #: The longest wait between two attempts.
    retry_backoff_max: datetime.timedelta = datetime.timedelta(minutes=10)
    #: Stop a run this long after it started (SIGTERM, then SIGKILL after
    #: ``timeout_grace``) and record it timed out, a failure; None: no limit.
    #: Unlike ``max_run_time``, which only stops renewing the lease, it ends
    #: the process: its scheduler's child, or itself when cron started it.
    timeout: datetime.timedelta | None = None
    #: How long a run stopped at its timeout, or cancelled, has between
    #: SIGTERM and SIGKILL.
    timeout_grace: datetime.timedelta = timeouts.DEFAULT_GRACE
    #: Start each of the scheduler's fires in a new Python interpreter; False
    #: (the default): fork it from the scheduler's fork server, where Django
    #: and the jobs are loaded already, in milliseconds. True for a job whose
    #: settings or imports must be read afresh at each run, or whose files a
    #: deploy replaces without restarting the schedulers.
    fresh_interpreter: bool = False
    #: Tags one pause holds for every job of (``jobclaims_pause --tag billing``):
    #: ``("billing", "nightly")``. Recorded at ``migrate`` (``JobTag``).
    tags: Sequence[str] = ()
    #: Monitors this job's runs check in with, beside ``JOBCLAIMS["MONITORS"]``:
    #: ``[{"ping": "https://hc-ping.com/<uuid>"}]`` (``jobclaims.running.checkins``).
    monitors: Sequence[Mapping[str, object]] = ()

    # Whether the command runs in a process of its own, started from the
    # command line (run_from_argv()): then all the process prints is the
    # run's output, not only what the command writes itself.
    _owns_process = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--window",
            dest="window_key",
            metavar="KEY",
            help="Claim this window instead of the current one (reruns, backfills).",
        )
        parser.add_argument(
            "--lease",
            type=positive_seconds,
            metavar="SECONDS",
            help="How long the claim lasts; renewed while the job runs.",
        )
        parser.add_argument(
            "--wait",
            type=wait_seconds,
            metavar="SECONDS",
            help=(
                "If a run whose lease ends within this long holds the window, wait "
                "for its end and take the window over, instead of skipping (for a "
                "retried Kubernetes Job: the run it retries may have died)."
            ),
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="Run the window again even if it already succeeded.",
        )
        parser.add_argument(
            "--schedule-name",
            metavar="NAME",
            help=(
                "Claim a fire of this one of the job's schedules: a job with several "
                "claims each schedule's fires under its own name."
            ),
        )
        # How jobclaims_scheduler starts the job under the claim it took:
        # the child runs that claim (job, --window, token) without claiming.
        parser.add_argument("--claim-token", help=argparse.SUPPRESS)

    def run_from_argv(self, argv: list[str]) -> None:
        """Run from the command line (cron, a scheduler's child): the process is the job's."""
        self._owns_process = True
        super().run_from_argv(argv)

    def check(self, *args: Any, **kwargs: Any) -> None:
        """The system checks, leaving out the deployment's (``check_a_job_run()``)."""
        check_a_job_run(super().check, *args, command=self._command_name(), **kwargs)

    @classmethod
    def declares_window(cls) -> bool:
        """Whether the job sets ``window`` itself, rather than inheriting the default."""
        return any(
            "window" in vars(klass)
            for klass in cls.__mro__
            if klass is not JobCommand and issubclass(klass, JobCommand)
        )

    def run_job(self, run: JobRun, *args: Any, **options: Any) -> None:
        """Do the job's work. ``run`` is the claim this instance holds."""
        raise NotImplementedError("subclasses of JobCommand must provide a run_job() method")

    def handle(self, *args: Any, **options: Any) -> None:
        job = self.job_name or self._command_name()
        lease = self.lease_for(options["lease"])
        if found := timeouts.problems(self._command_name(), self.timeout, self.timeout_grace):
            raise CommandError(found[0])
        for entry in self.monitors:
            if (problem := monitor_problem(entry)) or (problem := _job_wide(entry)):
                raise CommandError(f"{type(self).__name__}.monitors: {problem}")
        if options.get("claim_token"):
            # The scheduler checked the schedule, and names the one it claimed for.
            if schedule_name := options.get("schedule_name"):
                job = naming.claim_name(job, schedule_name)
            self._run_adopted(job, lease, args, options)
            return
        if (scheduled := schedule_for_run(self, options.get("schedule_name"))) is not None:
            job = scheduled.job
        slots = slots_of(self, scheduled)
        key = options["window_key"] or ""
        try:
            key = run_key(job, slots, options["window_key"])
            validate_max_run_time(self.max_run_time)
            run: JobRun | Refusal = claim_waiting(
                job,
                key,
                options.get("wait"),
                lease=lease,
                force=options["force"],
                allow_overlap=(
                    scheduled.allow_overlap
                    if scheduled is not None
                    else Overlap.of(self.overlap, self.allow_overlap) == Overlap.ALLOW
                ),
                schedule=slots.recorded_schedule,
                series=None if scheduled is None else scheduled.series,
            )
        except ValueError as error:
            raise CommandError(error) from error
        except StandbyTimeout as error:
            raise CommandError(error) from error
        except DatabaseError as error:
            if not retries.is_transient(error):
                self._explain_missing_migrations(job, key, error)
            # Whatever the database answered, nothing ran: one line says so.
            raise CommandError(claim_failure(job, key, error)) from error
        # At -v 0 (cron) a skip says nothing and a run only what run_job()
        # says: cron mails any output, and stepping aside is normal.
        if isinstance(run, Refusal):
            if options["verbosity"]:
                self.stdout.write(_skip_message(run))
            return
        if options["verbosity"]:
            self.stdout.write(
                f"Claimed {job} {key} (attempt {run.attempt}), "
                f"lease until {_local(run.expires_at)}."
            )
        self._run(run, lease, args, options)

    def _run_adopted(
        self, job: str, lease: datetime.timedelta, args: tuple[Any, ...], options: dict[str, Any]
    ) -> None:
        """Run under the claim the scheduler took for this process."""
        use_parents_databases()
        key = options["window_key"]
        try:
            run = adopt(job, key, options["claim_token"]) if key else None
            renewed = run is not None and run.renew(
                lease, until=lease_deadline(run, self.max_run_time)
            )
        except DatabaseError as error:
            raise CommandError(
                f"Could not adopt {job} {key}: the database answered {retries.summary(error)}, "
                "so nothing ran; its claim ends with its lease"
            ) from error
        if run is None:
            raise CommandError(
                f"{job} {key}: the claim this process was started under is no longer "
                "held (its lease ran out before the process started, or another "
                "instance took it over), so nothing ran"
            )
        # The scheduler claimed with a short lease (scheduler.START_LEASE):
        # from here on the claim lasts the job's own.
        if not renewed:
            raise CommandError(
                f"{job} {key}: the claim this process was started under ended before "
                "it could be renewed, so nothing ran"
            )
        if options["verbosity"]:
            self.stdout.write(
                f"Adopted {job} {key} (attempt {run.attempt}), "
                f"lease until {_local(run.expires_at)}."
            )
        self._run(run, lease, args, options)

    def _command_name(self) -> str:
        """The name ``manage.py`` knows this command by: its module's name."""
        return type(self).__module__.rpartition(".")[2]

    def lease_for(self, given: datetime.timedelta | None) -> datetime.timedelta:
        """This run's lease: ``--lease``, else the class's, else the setting's."""
        if given is not None:
            return given  # positive_seconds() checked it.
        if self.lease is None:
            return jobclaims_settings.default_lease
        if problem := leases.problem(self.lease):
            raise CommandError(f"{self._command_name()}: lease {problem}")
        return self.lease

    def _explain_missing_migrations(self, job: str, key: str, error: DatabaseError) -> None:
        """Turn the error of a database without jobclaims' tables into the fix.

        The check reads the migrations table; a database that fails that
        read too is in trouble, not unmigrated, and says so in one line.
        """
        connection = connections[jobclaims_settings.claims_database(JobRun)]
        try:
            # Loading the graph reads the applied migrations already.
            executor = MigrationExecutor(connection)
            leaves = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "jobclaims"]
            missing = executor.migration_plan(leaves)
        except DatabaseError as also:
            # Each said once.
            answers = dict.fromkeys((retries.summary(error), retries.summary(also)))
            raise CommandError(
                f"Could not claim {job} {key}".rstrip()
                + f": the database answered {', then '.join(answers)}, "
                "so nothing ran; the next run tries again"
            ) from error
        if missing:
            migrate = "manage.py migrate jobclaims"
            if connection.alias != DEFAULT_DB_ALIAS:
                migrate += f" --database {connection.alias}"
            raise CommandError(
                f"jobclaims migrations are not applied to the {connection.alias!r} "
                f"database; run: {migrate}"
            )

    def _run(
        self,
        run: JobRun,
        lease: datetime.timedelta,
        args: tuple[Any, ...],
        options: dict[str, Any],
    ) -> None:
        stop = SelfStop(timeouts.seconds(self.timeout_grace))
        # A scheduler's child is timed by its scheduler, from its start.
        timeout = None if options.get("claim_token") else self.timeout
        tail = Tail(jobclaims_settings.output_kept)

        def printed() -> str | None:
            """What the run printed; None when nothing is kept (OUTPUT_KEPT = 0)."""
            return tail.text() if tail.size else None

        returned = False  # Whether run_job() returned.
        capture = (
            capturing_process(tail)
            if self._owns_process
            else teeing([self.stdout, self.stderr], tail)
        )

        def on_cancel(cancelled: JobCancelled) -> None:
            stop.stop(cancelled, last_words=lambda: None)  # Its row says cancelled.

        after_return = HeldBackOnceReturned()
        try:
            with (
                interrupting_on_stop_signals(),
                stop,
                after_return,
                holding(
                    run,
                    lease,
                    self.max_run_time,
                    on_cancel=on_cancel,
                    output=printed,
                    check_ins=self._check_ins(run, options),
                ),
                timeouts.timing_out(run, timeout, stop, printed),
                capture,
            ):
                self.run_job(run, *args, **options)
                returned = True
                after_return.returned()  # Done: a stop now waits for its success to be recorded.
        except JobInterrupted as interrupt:
            raise CommandError(
                f"{run} was {interrupt}; {_recorded(run)}",
                returncode=128 + interrupt.signum,
            ) from interrupt
        except JobTimedOut as timed_out:
            raise CommandError(
                f"{run} was {timed_out}; {_recorded(run)}", returncode=TIMED_OUT_STATUS
            ) from timed_out
        except JobCancelled as cancelled:
            raise CommandError(
                f"{run} was {cancelled}; it stopped there, its writes in run.fenced() "
                "refused from the cancel on"
            ) from cancelled
        except LeaseLapsed as lapsed:
            # Not sure it still held the window, or paused since its claim:
            # step aside, as from a refusal.
            if options["verbosity"]:
                self.stdout.write(_stepped_aside(lapsed))
            return
        except ClaimLost as lost:
            if (cancel := _cancellation_if_readable(run)) is not None:
                raise CommandError(f"{run} was {cancel}; {_after_cancel(returned)}") from lost
            raise CommandError(f"{lost}; stopped without recording an outcome") from lost
        if options["verbosity"]:
            self.stdout.write(self.style.SUCCESS(f"Ran {run.job} {run.window}."))

    def _check_ins(self, run: JobRun, options: dict[str, Any]) -> CheckIns:
        """The run's check-ins, telling its monitors the job's schedule: its
        schedule in its zone, else its window; and how long it may run."""
        monitors = monitors_for(run.job, self.monitors)
        if not monitors:
            return CheckIns(run, [], Cadence())
        longest = self.timeout or self.max_run_time
        try:
            scheduled = schedule_for_run(self, options.get("schedule_name"))
        except CommandError:
            scheduled = None  # Several schedules, not named: its claim's is as good.
        if scheduled is None:
            return CheckIns(run, monitors, Cadence.of_recorded(run.schedule, longest))
        return CheckIns(run, monitors, Cadence.of_schedule(scheduled.cron, longest))


def _job_wide(entry: Mapping[str, object]) -> str:
    """A job's own monitor is for its runs alone: it names no jobs."""
    return (
        "a job's own monitor takes no 'jobs'; name them in JOBCLAIMS['MONITORS']"
        if ("jobs" in entry)
        else ""
    )


def _skip_message(refusal: Refusal) -> str:
    """Say why the claim was refused, from the row that refused it."""
    skipped = f"Skipped {refusal.job} {refusal.window}"
    if refusal.paused is not None:
        return f"{skipped}: {paused_and_how_to_resume(refusal)}."
    if refusal.owner is None:
        return f"{skipped}: another instance claimed it just now."
    if refusal.reason == Reason.OVERLAP:
        return (
            f"{skipped}: the {refusal.held_window} run, held by {refusal.owner} until "
            f"{_local(refusal.expires_at)}, is still running; set allow_overlap = True "
            "to let windows overlap."
        )
    if refusal.reason == Reason.SLOT_RAN and refusal.held_job is not None:
        if refusal.status == JobRun.Status.RUNNING:
            state = f"is still running, held by {refusal.owner}"
        elif refusal.status == JobRun.Status.SUCCEEDED:
            state = f"succeeded at {_local(refusal.finished_at)}"
        else:
            state = f"is {refusal.status}"
        return (
            f"{skipped}: its schedule claimed this fire as {refusal.held_job}, whose run "
            f"{state}; a fire runs once under whichever name of its schedule claimed it first."
        )
    if refusal.reason == Reason.SLOT_RAN:
        return f"{skipped}: the {refusal.held_window} run covers the same time and " + (
            f"is still running, held by {refusal.owner}."
            if refusal.status == JobRun.Status.RUNNING
            else f"succeeded at {_local(refusal.finished_at)}; pass --force to run it again."
        )
    if refusal.reason == Reason.SUCCEEDED:
        return (
            f"{skipped}: it already succeeded at {_local(refusal.finished_at)}; "
            "pass --force to run it again."
        )
    return f"{skipped}: held by {refusal.owner} until {_local(refusal.expires_at)}."


def paused_and_how_to_resume(refusal: Refusal) -> str:
    """Who paused the job that refused ``refusal``, and the command that
    resumes it: the pause's own job, which for one of a job's several
    schedules may be the whole job's (``jobclaims.claims.naming``), or the
    pause of all jobs."""
    assert refusal.paused is not None, "a refusal by a pause"
    if refusal.paused.of_all_jobs:
        return (
            f"all jobs {_paused(refusal.paused)}; resume them with manage.py jobclaims_resume --all"
        )
    job = refusal.paused.job or refusal.job
    if job.startswith(naming.TAG_MARK):
        tag = job.removeprefix(naming.TAG_MARK)
        return (
            f"its tag {tag} was {_paused(refusal.paused)}; "
            f"resume it with manage.py jobclaims_resume --tag {shlex.quote(tag)}"
        )
    whose = "" if job == refusal.job else f"its job {job} was "
    return (
        f"{whose}{_paused(refusal.paused)}; "
        f"resume it with manage.py jobclaims_resume {shlex.quote(job)}"
    )


def _paused(note: PauseNote) -> str:
    said = f"paused by {note.by} at {_local(note.at)}"
    if note.until is not None:
        said += f" until {_local(note.until)}"
    return f"{said} ({note.reason})" if note.reason else said


def _cancellation_if_readable(run: JobRun) -> JobCancelled | None:
    """Who cancelled a run whose claim was lost, if the database can say.

    The claim is often lost because the database went away (a killed
    node, a failover): then the lost claim's own message is the outcome.
    """
    try:
        return cancellation(run)
    except DatabaseError:
        return None


def _stepped_aside(lapsed: LeaseLapsed) -> str:
    """Why a claimed run did not start: a pause since its claim says how to resume."""
    refusal = lapsed.refusal
    if refusal is None or refusal.paused is None:
        return f"{lapsed}."
    return (
        f"Did not start {refusal.job} {refusal.window}: {paused_and_how_to_resume(refusal)}. "
        "The pause came after its claim, so the claim is given back, recorded cancelled."
    )


def _after_cancel(returned: bool) -> str:
    """What became of the writes of a run cancelled before it ended, which
    ended otherwise than by the cancel's ``JobCancelled``."""
    if returned:
        return (
            "its run_job() returned after the cancel: its writes in run.fenced() from the "
            "cancel on were refused, and what it wrote outside run.fenced() stands"
        )
    return (
        "a write of it in run.fenced() was refused, and its run_job() stopped there "
        "(ClaimLost); what it wrote outside run.fenced() stands"
    )


def _recorded(run: JobRun) -> str:
    """What an interrupted run's claim says now: release() sets its status."""
    if run.status == JobRun.Status.FAILED:
        return "its claim is released as failed, so the next run may start at once"
    if run.status == JobRun.Status.TIMED_OUT:
        return "its claim is recorded timed out, so the next run may start at once"
    if run.status == JobRun.Status.SUCCEEDED:
        return "it had finished, and its success is recorded"
    return (
        "its outcome could not be recorded (its claim was lost, or the database "
        "failed), so the next run takes the window over when the lease ends"
    )


def schedule_for_run(command: JobCommand, name: str | None = None) -> JobSchedule | None:
    """The schedule a run of ``command`` claims a fire of: the one named
    ``name``, or the job's only one; None for a job without one. A job with
    several must be told which."""
    if command.schedule is None and not command.schedules:
        if name is not None:
            raise CommandError(f"--schedule-name {name!r}: this job has no schedules")
        return None
    try:
        each = JobSchedule.each_of(command, command._command_name())
    except ValueError as error:
        raise CommandError(error) from error
    if name is not None:
        found = next((job for job in each if job.name == name), None)
        if found is None:
            names = ", ".join(repr(job.name) for job in each)
            raise CommandError(f"--schedule-name {name!r} names none of its schedules: {names}")
        return found
    if len(each) > 1:
        # jobclaims_run starts the job with the schedule's arguments, which
        # --schedule-name alone would not give it.
        runs = " or ".join(f"manage.py jobclaims_run {shlex.quote(job.job)}" for job in each)
        raise CommandError(
            f"{command._command_name()} has several schedules, each with its own claims; "
            f"run the one you mean with {runs}"
        )
    return each[0]


def slots_of(command: JobCommand, scheduled: JobSchedule | None) -> Slots:
    """How a run of ``command`` cuts time: by its schedule ``scheduled``
    (``schedule_for_run()``), else by its window."""
    if scheduled is not None:
        return scheduled.slots
    try:
        return Slots.of_window(command.window)
    except ValueError as error:
        raise CommandError(f"{command._command_name()}: {error}") from error


def problems(name: str, command_class: type[JobCommand]) -> list[str]:
    """What keeps the job ``name``, started by your own scheduler, from
    running, as each run of it would say it: its ``window``, ``lease``,
    ``max_run_time`` and ``timeout``. Check W007 says it at deploy time;
    a scheduled job's are its schedule's (``jobclaims.jobs.schedules.problems``)."""
    found = []
    try:
        windows.resolve(command_class.window)
    except ValueError as error:
        found.append(f"{name}: {error}")
    lease = command_class.lease
    if lease is not None and (problem := leases.problem(lease)):
        found.append(f"{name}: lease {problem}")
    try:
        validate_max_run_time(command_class.max_run_time)
    except ValueError as error:
        found.append(f"{name}: {error}")
    return found + timeouts.problems(name, command_class.timeout, command_class.timeout_grace)


def tag_problems(name: str, tags: Sequence[str]) -> list[str]:
    """What is wrong with the job ``name``'s ``tags``, naming the fix: each
    must be a word a command line takes as it is (letters, digits, ``_``,
    ``.``, ``-``), at most ``TAG_LENGTH`` characters."""
    if isinstance(tags, str):
        return [f"{name}: tags must be a list of tags, like [{tags!r}]"]
    return [
        f"{name}: tag {tag!r} must be letters, digits, '_', '.' or '-', at most "
        f"{TAG_LENGTH} characters, like 'billing'"
        for tag in tags
        if not isinstance(tag, str) or not TAG_PATTERN.fullmatch(tag)
    ]


def run_key(job: str, slots: Slots, explicit: str | None) -> str:
    """The key a run of ``job`` claims: of the slot ``explicit`` (``--window``)
    names, else of the one due now by the database clock."""
    try:
        return slot_key(slots, explicit)
    except ValueError as error:
        about = "--window" if explicit is not None else job
        raise CommandError(f"{about}: {error}") from error


def _local(moment: datetime.datetime | None) -> str:
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S %Z}" if moment else "?"
