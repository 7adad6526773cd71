"""The scheduler that every host may run: it starts each scheduled job once per fire.

Every scheduler wakes at each fire time and claims the fire in its own
process. The claim decides: on the one host whose claim wins, the scheduler
starts ``manage.py <job> --window <fire>`` as a child process that runs
under that claim (it adopts it by job, window and token instead of claiming
again, renews it while it runs and records how it ended); every other host
records its skip and starts nothing. A losing host costs the claim's few
statements, never a Python process.

When a child ends without succeeding (it failed, could not start, died
before adopting its claim, or was killed) the scheduler settles the fire by
the job's retry policy (``jobclaims.attempts``): retrying after a backoff, or
failed. While children run, it looks every ``WATCH`` for one past its job's
``timeout`` or one an operator cancelled, and stops it: SIGTERM, then
SIGKILL after the job's ``timeout_grace`` (``jobclaims.timeouts``,
``jobclaims.cancels``). Every scheduler claims due retries as it claims fires, so each
attempt runs on one host.

Stopped by SIGTERM or SIGINT, a scheduler starts nothing more and gives its
running jobs ``grace`` to finish; then (or at a second signal) it passes the
signal on and hands each interrupted fire off, due for a retry at once, to
the next live scheduler that looks. A scheduler killed outright leaves its
claims to expire and be taken over, like any dead holder.
"""

from __future__ import annotations

import datetime
import random
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import DatabaseError, close_old_connections
from django.db.models import Q

from jobclaims import attempts, cancels, pauses, schedule_versions, timeouts, wall_times
from jobclaims.children import job_argv, job_environment
from jobclaims.claims.rule import Refusal
from jobclaims.clock import DatabaseNow, database_now
from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun
from jobclaims.schedules import ON_TIME, JobSchedule, Misfire
from jobclaims.seen import SeenRecorder

#: While children run or fires wait to be caught up, look again this often.
POLL = 1.0
#: While children run, look this often for one past its timeout or cancelled.
WATCH = 0.5
#: How long to wait before trying again when the database does not answer.
RECONNECT = 5.0
#: The lease a scheduler claims a fire with; the job's process renews it to
#: the job's own lease once it adopts the claim. A scheduler killed between
#: the claim and the start holds the fire no longer than this.
START_LEASE = datetime.timedelta(minutes=2)
#: How long after a refusing holder's lease ends to look at its fire again.
LOOK_AGAIN = datetime.timedelta(seconds=1)
ON_A_DAY = datetime.timedelta(days=1)
#: The exit statuses of a job that a stop signal interrupted (``JobCommand``).
_STOPPED_STATUSES = frozenset(128 + signum for signum in (signal.SIGTERM, signal.SIGINT))


@dataclass
class HeldFire:
    """A fire another holder's claim refused, and when to look at it again."""

    fire: datetime.datetime
    key: str
    look_at: datetime.datetime


@dataclass
class Child:
    """A job's process that this scheduler started, and the claim it runs under."""

    job: JobSchedule
    run: JobRun
    process: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    #: Whether this scheduler passed a stop signal on to it.
    interrupted: bool = False
    #: Why this scheduler stopped it, if it did: timed out or cancelled.
    stopped: str | None = None
    #: When (``time.monotonic()``) a stopped child that still runs is killed.
    kill_at: float = 0.0

    def stop(self, why: str) -> None:
        """SIGTERM now, SIGKILL after the job's grace (``watch()`` sends it)."""
        self.stopped = why
        self.kill_at = time.monotonic() + self.job.timeout_grace.total_seconds()
        if self.process.poll() is None:
            self.process.terminate()

    def past_timeout(self, now: float) -> bool:
        timeout = self.job.timeout
        return timeout is not None and now - self.started >= timeout.total_seconds()


@dataclass
class Delayed:
    """A fire this scheduler won whose start waits out the job's jitter."""

    job: JobSchedule
    fire: datetime.datetime
    run: JobRun
    #: How long after its claim it starts, in seconds: chosen at random.
    delay: float
    #: When (``time.monotonic()``) its process starts.
    start_at: float


@dataclass
class Awaited:
    """A retry this scheduler scheduled, which it waits for under ``--once``."""

    key: str
    due: datetime.datetime


class Scheduler:
    """Claims each due fire and starts the job's process where the claim won."""

    def __init__(
        self,
        jobs: list[JobSchedule],
        *,
        max_jobs: int,
        say: Callable[[str], None],
        warn: Callable[[str], None] | None = None,
        grace: datetime.timedelta = datetime.timedelta(),
        verbosity: int = 1,
    ):
        self.jobs = jobs
        self.max_jobs = max_jobs
        self.say = say
        #: Where what went wrong is said, even when ``say`` is quiet (-v 0).
        self.warn = warn or say
        #: How long a stop waits for running jobs before it interrupts them.
        self.grace = grace
        #: The jobs' own verbosity: the scheduler's.
        self.verbosity = verbosity
        self.db = jobclaims_settings.claims_database(JobRun)
        self.children: dict[str, Child] = {}
        #: Won fires whose start waits out the job's jitter, by job.
        self.delayed: dict[str, Delayed] = {}
        #: The last fire this host tried per job: each fire is tried once.
        self.tried: dict[str, datetime.datetime] = {}
        #: Jobs with missed fires still to catch up (misfire = "all").
        self.catching_up: set[str] = set()
        #: Per job, its latest fire that another holder's claim refused.
        self.refused: dict[str, HeldFire] = {}
        #: Per job, the retry this host scheduled last (``--once`` waits for it).
        self.awaited: dict[str, Awaited] = {}
        self.stopping = threading.Event()
        #: Set once the stop signal was passed on to the running jobs.
        self.passed_on = threading.Event()
        self.signum: int | None = None
        #: What the signal handler leaves to be said (``say_signalled()``).
        self.signalled: deque[str] = deque()
        #: This scheduler's row in SchedulerSeen, for health to see it alive.
        self.seen = SeenRecorder(jobs)
        #: Per job, when its schedule came into force (recorded at its first look).
        self.in_force: dict[str, datetime.datetime] = {}

    def run_forever(self) -> None:
        """Start due jobs until SIGTERM or SIGINT, then pass it on and wait."""
        with self._stop_on_signals():
            while not self.stopping.is_set():
                try:
                    now = database_now(self.db)
                    read_at = time.monotonic()
                    self.reap()
                    self.watch()
                    self.start_delayed()
                    self.start_due(now)
                except DatabaseError as error:
                    self.warn(
                        f"The database did not answer ({error}); trying again in {RECONNECT:.0f} s"
                    )
                    close_old_connections()
                    self.stopping.wait(RECONNECT)
                    continue
                # The time the claims took is part of the wait already.
                self.stopping.wait(max(self._sleep(now) - (time.monotonic() - read_at), 0.002))
            self.shutdown()

    def once(self) -> None:
        """Start what is due now, wait for it to end (catching up, for "all"),
        and for the retries of the fires it ran that failed.

        Fires that come due meanwhile are left to the next ``--once``."""
        with self._stop_on_signals():
            # The fires due as it started; a later one is the next --once's.
            started = database_now(self.db)
            while not self.stopping.is_set():
                self.reap()
                self.watch()
                self.start_delayed()
                now = database_now(self.db)
                self.start_due(started)
                # A retry due by now was claimed just now, here or elsewhere.
                self.awaited = {job: each for job, each in self.awaited.items() if each.due > now}
                if not self.children and not self.awaited and not self.delayed:
                    break
                wait = POLL / 10
                if not self.children and self.awaited:
                    soonest = min(each.due for each in self.awaited.values())
                    wait = (soonest - now).total_seconds() + 0.002
                if self.delayed:
                    wait = min(wait, self._until_delayed())
                self.stopping.wait(wait)
            self.shutdown()

    def start_due(self, now: datetime.datetime) -> None:
        self.seen.record(now)
        won: list[tuple[JobSchedule, datetime.datetime, JobRun]] = []
        # A due retry first: it is older than any fire, and a host that is
        # always busy with the job's fires must not starve it.
        self._claim_retries(won)
        retried = {job.job for job, _, _ in won}
        # Each host in its own order: most claims then find a fire free, or
        # already committed by another host, rather than meet its INSERT.
        for job in random.sample(self.jobs, len(self.jobs)):
            if job.job in self.children or job.job in self.delayed or job.job in retried:
                continue  # Never a second copy of a job this host is running.
            if len(self.children) + len(self.delayed) + len(won) >= self.max_jobs:
                break  # Left for a host with room, or for the next look.
            for fire, key in self._to_claim(job, now) or self._to_take_over(job, now):
                self.tried[job.job] = fire
                if (run := self._claim(job, key)) is not None:
                    self.refused.pop(job.job, None)
                    won.append((job, fire, run))
                    break
                look_at = now + min(job.lease, START_LEASE) + LOOK_AGAIN
                self.refused[job.job] = HeldFire(fire, key, look_at)
        # Every claim first, then the processes: starting one takes longer
        # than a claim, and the other fires' claims need not wait for it.
        for job, fire, run in won:
            if job.jitter and job.job not in retried:
                delay = random.uniform(0, job.jitter.total_seconds())
                self.delayed[job.job] = Delayed(job, fire, run, delay, time.monotonic() + delay)
            else:
                self._start(job, fire, run)

    def start_delayed(self) -> None:
        """Start each won fire whose jitter is over, on a claim it still holds.

        The claim was taken with its lease lengthened by the jitter, and is
        renewed first: one that ended meanwhile (an operator cancelled or
        expired it) starts nothing, for another holder may have it now.
        """
        now = time.monotonic()
        for name, each in list(self.delayed.items()):
            if each.start_at > now:
                continue
            del self.delayed[name]
            if not each.run.renew(min(each.job.lease, START_LEASE)):
                self.warn(
                    f"Did not start {each.run}: its claim ended while its start waited "
                    "out its jitter (an operator cancelled or expired it), so nothing ran"
                )
                continue
            self._start(each.job, each.fire, each.run, each.delay)

    def _until_delayed(self) -> float:
        """Seconds until the soonest start that waits out its jitter."""
        soonest = min(each.start_at for each in self.delayed.values())
        return max(soonest - time.monotonic(), 0) + 0.002

    def reap(self) -> None:
        """Log each child that ended, and settle its fire if it did not succeed."""
        for name, child in list(self.children.items()):
            code = child.process.poll()
            if code is None:
                continue
            del self.children[name]
            if child.job.misfire == Misfire.ALL:
                self.catching_up.add(name)
            took = time.monotonic() - child.started
            try:
                note = self._settle(child, code)
            except DatabaseError as error:
                self.warn(
                    f"Could not settle {child.run} ({error}); it is taken over when its lease ends"
                )
                note = ""
            say = self.warn if code else self.say
            say(
                f"Ended {_fire(child.job, child.run)}: pid {child.process.pid} "
                f"exited {code} after {took:.1f} s{note}"
            )

    def watch(self) -> None:
        """Stop each child past its job's timeout, or whose run an operator
        cancelled (one read, of the rows of the children): SIGTERM, then
        SIGKILL once its grace is over, if it still runs."""
        if not self.children:
            return
        now = time.monotonic()
        cancelled = cancels.cancelled_among(child.run for child in self.children.values())
        for child in self.children.values():
            if child.stopped is None and child.run.pk in cancelled:
                child.stop(JobRun.Status.CANCELLED)
                self.warn(f"Cancelled {child.run}: sent pid {child.process.pid} SIGTERM")
            elif child.stopped is None and child.past_timeout(now):
                child.stop(JobRun.Status.TIMED_OUT)
                self.warn(
                    f"{child.run} reached its timeout of {child.job.timeout}: sent pid "
                    f"{child.process.pid} SIGTERM"
                )
            elif child.stopped and now >= child.kill_at and child.process.poll() is None:
                child.process.kill()
                self.warn(
                    f"{child.run} still ran {child.job.timeout_grace} after its SIGTERM: "
                    f"sent pid {child.process.pid} SIGKILL"
                )

    def _settle(self, child: Child, code: int) -> str:
        """Settle a child's fire by how it ended (``jobclaims.attempts``), and say how."""
        run = child.run
        why = (
            f"The job's process exited with status {code} without recording how "
            "its run ended: it failed to start, or was killed."
        )
        # A job stopped with its scheduler: by the signal passed on, or by
        # the same signal sent to the whole group (systemd's default
        # KillMode), which the job's exit status tells (128 + signal).
        stopped_too = self.signum is not None and code in _STOPPED_STATUSES
        if child.stopped == JobRun.Status.CANCELLED:
            return "; cancelled by an operator"  # Its row says so, and by whom.
        if child.stopped == JobRun.Status.TIMED_OUT:
            timeout = child.job.timeout
            assert timeout is not None, "only a job with a timeout is stopped at one"
            why = (
                timeouts.killed_message(timeout, child.job.timeout_grace, "its scheduler")
                if code == -signal.SIGKILL
                else f"Timed out after {timeout}: its scheduler sent it SIGTERM."
            )
            status = attempts.after_timeout(run, child.job.retry, why)
            return self._settled_note(run, status, "timed out")
        if child.interrupted or stopped_too:
            if attempts.hand_off(run, f"Interrupted by a stop of its scheduler. {why}"):
                return "; interrupted by the stop, so it is handed off to the next scheduler"
            return ""
        status = attempts.after_failure(run, child.job.retry, why)
        return self._settled_note(run, status, "failed")

    def _settled_note(self, run: JobRun, status: str | None, recorded: str) -> str:
        """Say how a fire was settled, and await its retry under ``--once``."""
        if status != JobRun.Status.RETRYING:
            return f"; its claim is recorded {recorded}" if status else ""
        due = JobRun.objects.filter(pk=run.pk).values_list("retry_at", flat=True).first()
        if due is not None:
            self.awaited[run.job] = Awaited(run.window, due)
        return f"; it {recorded}, so it is retried at {due:%H:%M:%S.%f} UTC" if due else ""

    def shutdown(self) -> None:
        """Give running jobs the grace to end, then pass the stop signal on,
        and wait for them to end. A fire still waiting out its jitter is
        handed off at once to the next scheduler that looks: it never started."""
        self.say_signalled()
        for each in self.delayed.values():
            if attempts.hand_off(each.run, "Its scheduler stopped before its jitter was over."):
                self.say(f"Handed {each.run} off to the next scheduler: it had not started yet")
        self.delayed.clear()
        if self.signum is not None:
            deadline = time.monotonic() + self.grace.total_seconds()
            while self.children and time.monotonic() < deadline:
                self.reap()
                self.watch()
                self.say_signalled()
                self.passed_on.wait(min(POLL / 10, max(deadline - time.monotonic(), 0)))
            self.pass_on(self.signum)
        while self.children:
            self.reap()
            self.say_signalled()
            if self.children:
                time.sleep(POLL / 10)
        self.say_signalled()

    def say_signalled(self) -> None:
        """Say what the stop signals that came asked to be said, in order."""
        while self.signalled:
            self.say(self.signalled.popleft())

    def pass_on(self, signum: int) -> None:
        """Send ``signum`` to every running job not sent one yet."""
        for child in list(self.children.values()):
            if not child.interrupted and child.process.poll() is None:
                child.interrupted = True
                child.process.send_signal(signum)
        self.passed_on.set()

    def _to_claim(
        self, job: JobSchedule, now: datetime.datetime
    ) -> list[tuple[datetime.datetime, str]]:
        """The fires of ``job`` to try now, oldest first."""
        latest = job.cron.latest_fire(now)
        if job.misfire == Misfire.ALL and (
            job.job in self.catching_up or self.tried.get(job.job) != latest
        ):
            missed = self._unclaimed(job, now)
            if len(missed) <= 1:
                self.catching_up.discard(job.job)
            else:
                self.catching_up.add(job.job)
            return missed
        fire = job.due(now)
        if fire is None or self.tried.get(job.job) == fire or fire < self._oldest_due(job):
            return []
        key = job.slots.key_at(fire)
        if now - fire > ON_TIME and self._settled_or_held(job, key):
            # A late look (a start, --once from cron): one read, rather than
            # a claim refused and a skip recorded for a fire long settled.
            self.tried[job.job] = fire
            return []
        return [(fire, key)]

    def _claim_retries(self, won: list[tuple[JobSchedule, datetime.datetime, JobRun]]) -> None:
        """Claim the due retries of jobs this host has room for, oldest first.

        Every scheduler looks, so a fire handed off by a stopping host runs
        again at once, and a failed one when its backoff ends, on one host.
        """
        busy = set(self.children) | set(self.delayed) | {job.job for job, _, _ in won}
        room = self.max_jobs - len(self.children) - len(self.delayed) - len(won)
        by_name = {job.job: job for job in self.jobs if job.job not in busy}
        if room < 1 or not by_name:
            return
        due = (
            JobRun.objects.due_retries()
            .filter(job__in=list(by_name))
            .order_by("retry_at")
            .values_list("job", "window")
        )
        for name, key in list(due):
            if name in busy:
                continue  # One attempt of a job at a time on this host.
            job = by_name[name]
            if (run := self._claim(job, key, retry=True)) is not None:
                busy.add(name)
                won.append((job, run.claimed_at, run))
                room -= 1
                if not room:
                    return

    def _to_take_over(
        self, job: JobSchedule, now: datetime.datetime
    ) -> list[tuple[datetime.datetime, str]]:
        """The refused fire of ``job``, once its holder died without an outcome.

        The holder may be a scheduler killed between its claim and its
        job's start, or a host lost with the job running: nothing else would
        claim that fire again before the next one. One read, a lease after
        the refusal and then at each end of the holder's renewed lease, for
        as long as it is the job's latest fire and its run has not ended.
        """
        refused = self.refused.get(job.job)
        if refused is None or now < refused.look_at:
            return []
        row = (
            JobRun.objects.using(self.db)
            .filter(job=job.job, window=refused.key)
            .values_list("status", "expires_at")
            .first()
        )
        if self.tried.get(job.job) != refused.fire or row is None:
            del self.refused[job.job]  # A later fire came, or the row was pruned.
            return []
        status, expires_at = row
        if status != JobRun.Status.RUNNING:
            del self.refused[job.job]  # Its run ended and recorded how.
            return []
        if expires_at > now:
            refused.look_at = expires_at + LOOK_AGAIN  # Alive: renewed its lease.
            return []
        return [(refused.fire, refused.key)]

    def _settled_or_held(self, job: JobSchedule, key: str) -> bool:
        """Whether a fire's row leaves nothing to claim: any row but a holder
        that died (running, its lease over), which the claim takes over.

        Read from the row, not from this process's memory, so that a
        ``--once`` from cron takes over the fire of a holder that vanished.
        """
        lapsed = Q(status=JobRun.Status.RUNNING, expires_at__lte=DatabaseNow())
        if JobRun.objects.filter(job=job.job, window=key).exclude(lapsed).exists():
            return True
        return bool(pauses.refused_windows(job.job, [key]))

    def _oldest_due(self, job: JobSchedule) -> datetime.datetime:
        """The oldest fire ``job``'s schedule had due: one on time as it came
        into force. Anything older was never due, so never missed."""
        if job.job not in self.in_force:
            self.in_force[job.job] = schedule_versions.in_force_since(job)
        return self.in_force[job.job] - ON_TIME

    def _unclaimed(
        self, job: JobSchedule, now: datetime.datetime
    ) -> list[tuple[datetime.datetime, str]]:
        """Fires since the job's newest claim that no claim holds, oldest first,
        none from before the schedule came into force."""
        oldest = self._oldest_due(job)
        runs = JobRun.objects.filter(job=job.job)
        newest = runs.order_by("-claimed_at").first()
        if newest is None:
            latest = job.cron.latest_fire(now)
            return [] if latest is None or latest < oldest else [(latest, job.slots.key_at(latest))]
        try:
            anchor = wall_times.parse(newest.window)
        except ValueError:
            anchor = newest.claimed_at - (job.window.longest if job.window else ON_A_DAY)
        anchor = max(anchor, oldest)
        fires = job.missed_since(anchor - datetime.timedelta(microseconds=1), now)
        keys = [key for _, key in fires]
        claimed = set(runs.filter(window__in=keys).values_list("window", flat=True))
        claimed |= pauses.refused_windows(job.job, keys)
        return [(fire, key) for fire, key in fires if key not in claimed]

    def _claim(self, job: JobSchedule, key: str, *, retry: bool = False) -> JobRun | None:
        """Claim a fire; only the claim of a due retry takes a failed one over."""
        # A losing host says nothing of its refusals: it needs no details.
        run = JobRun.objects.try_claim(
            job.job,
            key,
            lease=min(job.lease, START_LEASE) + (job.jitter or datetime.timedelta()),
            allow_overlap=job.allow_overlap,
            schedule=job.slots.recorded_schedule,
            details=False,
            take_failed=retry,
        )
        return None if isinstance(run, Refusal) else run

    def _start(
        self, job: JobSchedule, fire: datetime.datetime, run: JobRun, delay: float | None = None
    ) -> None:
        """Start the job's process under ``run``, or record the claim failed."""
        late = (run.claimed_at - fire).total_seconds()
        try:
            process = subprocess.Popen(
                job_argv(job, run.window, run, self.verbosity),
                stdin=subprocess.DEVNULL,
                env=job_environment(),
                # Our own signals reach the job once, passed on by shutdown().
                start_new_session=True,
            )
        except OSError as error:
            run.release(JobRun.Status.FAILED, error=f"Could not start the job's process: {error}")
            self.say(f"Could not start {run}: {error}; its claim is recorded failed")
            return
        self.children[job.job] = Child(job, run, process)
        waited = ""
        if delay is not None:
            waited = f", started {delay:.3f} s after its claim (jitter up to {job.jitter})"
        self.say(
            f"Started {_fire(job, run)}: pid {process.pid}, attempt {run.attempt}, "
            f"claimed {late:.3f} s after its fire time{waited}"
        )

    def _sleep(self, now: datetime.datetime) -> float:
        """Seconds until the next fire of any job, the next look at a refused
        one or the next look for due retries, by the database clock."""
        upcoming = [next(job.cron.fires_after(now), None) for job in self.jobs]
        wakes = [fire for fire in upcoming if fire is not None]
        # A look already due waits for room for another job: POLL below.
        wakes += [each.look_at for each in self.refused.values() if each.look_at > now]
        soonest = min(wakes, default=None)
        wait = 3600.0 if soonest is None else (soonest - now).total_seconds()
        # Due retries are looked for this often, so that a fire a stopping
        # host handed off runs again at once.
        wait = min(wait, WATCH if self.children else POLL)
        if self.delayed:
            wait = min(wait, self._until_delayed())
        # A little past the fire, so the database clock has reached it too.
        return max(wait, 0) + 0.002

    @contextmanager
    def _stop_on_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def stop(signum: int, frame: object) -> None:
            # The handler runs between two of the main thread's bytecodes,
            # maybe inside its write to stdout, which a second write would
            # break (a reentrant call): it leaves what to say to that thread.
            name = signal.Signals(signum).name
            if self.signum is not None:
                self.pass_on(signum)
                self.signalled.append(f"{name} again: passing it on to the running jobs")
                return
            self.signum = signum
            self.stopping.set()
            if self.children:
                self.signalled.append(
                    f"Stopping on {name}: no new jobs start; the running ones have "
                    f"{self.grace.total_seconds():g} s to finish"
                )
            else:
                self.signalled.append(f"Stopping on {name}: no new jobs start")

        previous = {
            signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _fire(job: JobSchedule, run: JobRun) -> str:
    """A fire as the scheduler's messages show it: its job, key and zone."""
    return f"{run.job} {run.window} ({job.time_zone})"
