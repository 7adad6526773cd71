"""The management-command base class that scheduled jobs subclass."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from jobclaims import leases, retries, schedule_names, timeouts, windows
from jobclaims.cancels import cancellation
from jobclaims.children import adopt, use_parents_databases
from jobclaims.claiming import claim_waiting, holding, slot_key, validate_max_run_time
from jobclaims.claims.rule import PauseNote, Reason, Refusal
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import (
    ClaimLost,
    JobCancelled,
    JobInterrupted,
    JobTimedOut,
    LeaseLapsed,
    StandbyTimeout,
)
from jobclaims.heartbeat import lease_deadline
from jobclaims.models import JobRun
from jobclaims.schedules import JobSchedule, Schedule
from jobclaims.slots import Slots
from jobclaims.stopping import SelfStop, interrupting_on_stop_signals

__all__ = ["JobCommand", "Schedule"]

#: The exit status of a run stopped at its timeout, as timeout(1) exits.
TIMED_OUT_STATUS = 124

#: True while a job's command runs the system checks, which leave out
#: jobclaims.W001 then (``JobCommand.check()``).
checking_a_job_run: ContextVar[bool] = ContextVar("jobclaims_checking_a_job_run", default=False)


def check_a_job_run(check: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Run ``check`` (a command's ``BaseCommand.check``) as a job's run needs it.

    Only the checks that read code: the deployment's (jobclaims.W001, and
    the database's own, which Django 6.1 runs for every command unless told
    which databases) are ``manage.py check``'s and ``migrate``'s. A run
    from cron need not mail them every time, and must not open a connection
    before its claim: with the database down, that claim says so in one
    line, where a check would print a traceback.
    """
    token = checking_a_job_run.set(True)
    try:
        check(*args, **{"databases": [], **kwargs})
    finally:
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
    (``jobclaims.timeouts``); a run an operator cancelled is stopped and
    stays recorded cancelled (``jobclaims.cancels``).
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
    #: Stop renewing the lease this long after the claim, so a run that hangs
    #: loses its window to the next instance; None: renew for as long as it runs.
    max_run_time: datetime.timedelta | None = None
    #: A cron expression in TIME_ZONE (``"5 2 * * *"``): each fire time is a
    #: window, and ``jobclaims_scheduler`` starts the job at each. None: the
    #: job is started by your own cron, and ``window`` cuts its windows.
    schedule: str | None = None
    #: Several schedules, each with its own arguments and zone, instead of
    #: ``schedule``: ``[Schedule("0 * * * *", args=["--region", "eu"]), ...]``.
    #: Each claims its own fires (``jobclaims.schedule_names``).
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

    def check(self, *args: Any, **kwargs: Any) -> None:
        """The system checks, leaving out the deployment's (``check_a_job_run()``)."""
        check_a_job_run(super().check, *args, **kwargs)

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
        if options.get("claim_token"):
            # The scheduler checked the schedule, and names the one it claimed for.
            if schedule_name := options.get("schedule_name"):
                job = schedule_names.claim_name(job, schedule_name)
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
                allow_overlap=self.allow_overlap,
                schedule=slots.recorded_schedule,
            )
        except ValueError as error:
            raise CommandError(error) from error
        except StandbyTimeout as error:
            raise CommandError(error) from error
        except DatabaseError as error:
            if retries.is_transient(error):
                raise CommandError(
                    f"Could not claim {job} {key}".rstrip()
                    + f": the database kept answering {retries.summary(error)} for "
                    f"{retries.RETRY_FOR:.0f} s, so nothing ran; the next run tries again"
                ) from error
            self._explain_missing_migrations(job, key, error)
            raise
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
            raise CommandError(f"{type(self).__name__}.lease {problem}")
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

        def on_cancel(cancelled: JobCancelled) -> None:
            stop.stop(cancelled, last_words=lambda: None)  # Its row says cancelled.

        try:
            with (
                interrupting_on_stop_signals(),
                stop,
                holding(run, lease, self.max_run_time, on_cancel=on_cancel),
                timeouts.timing_out(run, timeout, stop),
            ):
                self.run_job(run, *args, **options)
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
            raise CommandError(f"{run} was {cancelled}; it stopped") from cancelled
        except LeaseLapsed as lapsed:
            # Not sure it still held the window: step aside, as from a refusal.
            if options["verbosity"]:
                self.stdout.write(f"{lapsed}.")
            return
        except ClaimLost as lost:
            if (cancel := _cancellation_if_readable(run)) is not None:
                raise CommandError(
                    f"{run} was {cancel}; its writes were refused from then on"
                ) from lost
            raise CommandError(f"{lost}; stopped without recording an outcome") from lost
        if options["verbosity"]:
            self.stdout.write(self.style.SUCCESS(f"Ran {run.job} {run.window}."))


def _skip_message(refusal: Refusal) -> str:
    """Say why the claim was refused, from the row that refused it."""
    skipped = f"Skipped {refusal.job} {refusal.window}"
    if refusal.paused is not None:
        return (
            f"{skipped}: {_paused(refusal.paused)}; "
            f"resume it with manage.py jobclaims_resume {refusal.job}."
        )
    if refusal.owner is None:
        return f"{skipped}: another instance claimed it just now."
    if refusal.reason == Reason.OVERLAP:
        return (
            f"{skipped}: the {refusal.held_window} run, held by {refusal.owner} until "
            f"{_local(refusal.expires_at)}, is still running; set allow_overlap = True "
            "to let windows overlap."
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
    names = ", ".join(repr(job.name) for job in each)
    if name is not None:
        found = next((job for job in each if job.name == name), None)
        if found is None:
            raise CommandError(f"--schedule-name {name!r} names none of its schedules: {names}")
        return found
    if len(each) > 1:
        raise CommandError(
            f"{command._command_name()} has several schedules, each with its own claims; "
            f"name the one to run with --schedule-name: {names}"
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
        raise CommandError(f"{type(command).__name__}.window: {error}") from error


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
