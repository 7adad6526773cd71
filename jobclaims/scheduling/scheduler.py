"""The scheduler that every host may run: it starts each scheduled job once per fire.

Every scheduler wakes at each fire time and claims the fire in its own
process. The claim decides: on the one host whose claim wins, the scheduler
starts ``manage.py <job> --window <fire>`` as a child process, forked from
its fork server with Django loaded (``jobclaims.scheduling.launch``), that
runs under that claim (it adopts it by job, window and token instead of claiming
again, renews it while it runs and records how it ended); every other host
records its skip and starts nothing. A losing host costs the claim's few
statements, never a Python process.

When a child ends without succeeding (it failed, could not start, died
before adopting its claim, or was killed) the scheduler settles the fire by
the job's retry policy (``jobclaims.running.attempts``): retrying after a backoff, or
failed. While children run, it looks every ``WATCH`` for one past its job's
``timeout`` or one an operator cancelled, and stops it: SIGTERM, then
SIGKILL after the job's ``timeout_grace`` (``jobclaims.running.timeouts``,
``jobclaims.running.cancels``). Every scheduler claims due retries as it claims fires, so each
attempt runs on one host.

Stopped by SIGTERM or SIGINT, a scheduler starts nothing more and gives its
running jobs ``grace`` to finish; then (or at a second signal) it passes the
signal on (SIGKILL after the job's ``timeout_grace`` if it still runs) and
hands each interrupted fire off, due for a retry at once, to the next live
scheduler that looks, and records itself stopped: health
counts it live no longer. A scheduler killed outright leaves its claims to
expire and be taken over, like any dead holder, and counts as live until
``SCHEDULER_GRACE`` has passed.
"""

from __future__ import annotations

import datetime
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import DatabaseError, close_old_connections
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from jobclaims.claims.batch import Fire
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.conf import jobclaims_settings
from jobclaims.controls import pauses
from jobclaims.jobs import task_schedules
from jobclaims.jobs.schedules import ON_TIME, JobSchedule, Misfire, Overlap
from jobclaims.models import JobRun
from jobclaims.running import attempts, cancels, timeouts
from jobclaims.running.heartbeat import lease_deadline
from jobclaims.scheduling import retention, schedule_versions
from jobclaims.scheduling.forking import ForkedProcess
from jobclaims.scheduling.launch import JobProcess, Launcher
from jobclaims.scheduling.live_schedules import LiveSchedules
from jobclaims.scheduling.seen import SeenRecorder
from jobclaims.scheduling.wakeup import Wakeup
from jobclaims.time import leases, wall_times
from jobclaims.time.clock import DatabaseNow, database_now

#: While children run or fires wait to be caught up, look again this often.
POLL = 1.0
#: While children run, look this often for one past its timeout or cancelled.
WATCH = 0.5
#: How long to wait before trying again when the database does not answer.
RECONNECT = 5.0
#: The lease a scheduler claims a fire with (the job's own, if shorter). The
#: scheduler renews it, every third of it, until the job's process has
#: adopted the claim, which then renews it to the job's own lease: a process
#: that starts slower than its lease still runs, and a scheduler killed
#: between the claim and the adoption holds the fire no longer than this.
START_LEASE = datetime.timedelta(minutes=2)
ON_A_DAY = datetime.timedelta(days=1)
#: The exit statuses of a job that a stop signal interrupted (``JobCommand``).
_STOPPED_STATUSES = frozenset(128 + signum for signum in (signal.SIGTERM, signal.SIGINT))


@dataclass
class Child:
    """A job's process that this scheduler started, and the claim it runs under."""

    job: JobSchedule
    run: JobRun
    process: JobProcess
    started: float = field(default_factory=time.monotonic)
    #: Whether this scheduler passed a stop signal on to it.
    interrupted: bool = False
    #: Why this scheduler stopped it, if it did: timed out or cancelled.
    stopped: str | None = None
    #: When (``time.monotonic()``) a child sent SIGTERM, or the stop signal
    #: passed on, is killed if it still runs: its job's ``timeout_grace`` later.
    kill_at: float | None = None
    #: The signal it was sent last, by name.
    sent: str = ""
    #: When, by the database clock, this scheduler had sent its timeout's
    #: SIGTERM, if it could read it: a success its run recorded after that
    #: was cut short by the timeout (``attempts.after_timeout()``).
    timed_out_at: datetime.datetime | None = None
    #: Whether its process renewed the claim itself: it adopted it (or the
    #: claim ended), and this scheduler keeps it no longer.
    adopted: bool = False

    def stop(self, why: str) -> None:
        """SIGTERM now, SIGKILL after the job's grace (``watch()`` sends it)."""
        self.stopped = why
        self.signal(signal.SIGTERM)

    def signal(self, signum: int) -> None:
        """Send ``signum`` if it still runs, and kill it after the job's grace
        (``kill_if_past_grace()``), or sooner if a kill was due sooner."""
        kill_at = time.monotonic() + self.job.timeout_grace.total_seconds()
        self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)
        self.sent = signal.Signals(signum).name
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def kill_if_past_grace(self, now: float) -> bool:
        """SIGKILL it if it still runs past ``kill_at``; whether it was."""
        if self.kill_at is None or now < self.kill_at or self.process.poll() is not None:
            return False
        self.process.kill()
        self.kill_at = None  # Killed once: its end is reaped next.
        return True

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
        live: LiveSchedules | None = None,
        ends_process: bool = False,
    ):
        self._set_jobs(jobs)
        #: Whether the process ends when the scheduler does (``jobclaims_scheduler``).
        self.ends_process = ends_process
        #: Where the stored schedules' changes are read at each look; None: not read.
        self.live = live
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
        #: Per job whose overlap policy holds a fire back ("buffer",
        #: "replace"), the one fire waiting for the run before it to end.
        self.buffered: dict[str, tuple[datetime.datetime, str]] = {}
        #: Per job, the retry this host scheduled last (``--once`` waits for it).
        self.awaited: dict[str, Awaited] = {}
        #: Set once a stop signal came: what the history's keeper stops on.
        self.stopping = threading.Event()
        #: The stop signal that came first.
        self.signum: int | None = None
        #: What the signal handler leaves to be said (``say_signalled()``).
        self.signalled: deque[str] = deque()
        #: This scheduler's row in SchedulerSeen, for health to see it alive.
        self.seen = SeenRecorder(jobs)
        #: Per job, when its schedule came into force (recorded at its first look).
        self.in_force: dict[str, datetime.datetime] = {}
        #: Per job that had nothing to claim at its last look, its next fire:
        #: until then it is not looked at again (``_quiet()``).
        self.quiet_until: dict[str, datetime.datetime] = {}
        self.launcher = Launcher(jobs, self.warn)

    def _set_jobs(self, jobs: list[JobSchedule]) -> None:
        self.jobs = jobs
        #: The jobs by claim name and by series, for the fires other holders
        #: left, read back with their name and series (``_claim_left()``).
        self.by_name = {job.job: job for job in jobs}
        self.by_series = {job.series: job for job in jobs}
        #: Whether any job is a task's, whose fires need no room on this host.
        self.tasks = any(job.task is not None for job in jobs)

    def take_changes(self) -> None:
        """Run the stored schedules as they are now, if they changed.

        What this host knew of a schedule that changed or went is
        forgotten: its next fire is read from its new version, which comes
        into force now (``schedule_versions``), so no fire of the old
        version is caught up under the new. A run of it going on ends as
        it would have; a fire waiting for the run before it is dropped.
        """
        jobs = self.live.changed() if self.live is not None else None
        if jobs is None:
            return
        before = self.by_name
        self._set_jobs(jobs)
        for name, job in before.items():
            if self.by_name.get(name) != job:
                for known in (self.quiet_until, self.in_force, self.buffered, self.tried):
                    known.pop(name, None)
                self.catching_up.discard(name)
        self.seen.use(jobs)
        self.launcher.use(jobs)

    def run_forever(self) -> None:
        """Start due jobs until SIGTERM or SIGINT, then pass it on and wait."""
        # History is pruned in a thread of its own, off the fires' path.
        keeper = retention.Keeper.started(self.stopping, self.warn)
        # Loading while the first look claims: the first start finds it ready.
        self.launcher.open()
        with self._stop_on_signals() as wakeup:
            while self.signum is None:
                try:
                    now = database_now(self.db)
                    read_at = time.monotonic()
                    self.take_changes()
                    self.reap()
                    self.watch()
                    self.start_delayed()
                    self.start_due(now)
                except DatabaseError as error:
                    self.warn(
                        f"The database did not answer ({error}); trying again in {RECONNECT:.0f} s"
                    )
                    close_old_connections()
                    wakeup.wait(RECONNECT)
                    continue
                # The time the claims took is part of the wait already.
                wakeup.wait(max(self._sleep(now) - (time.monotonic() - read_at), 0.002))
            self.shutdown(wakeup)
        self.launcher.close()
        keeper.join()
        self.seen.stopped()

    def once(self) -> None:
        """Start what is due now, wait for it to end (catching up, for "all"),
        and for the retries of the fires it ran that failed.

        Fires that come due meanwhile are left to the next ``--once``."""
        with self._stop_on_signals() as wakeup:
            # The fires due as it started; a later one is the next --once's.
            started = database_now(self.db)
            while self.signum is None:
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
                wakeup.wait(wait)
            self.shutdown(wakeup)
        self.launcher.close()
        if self.signum is None:  # Its jobs have ended: the history's pass, if due.
            retention.run_due_pass(self.warn)
        self.seen.stopped()

    def start_due(self, now: datetime.datetime) -> None:
        self.seen.record(now)
        won: list[tuple[JobSchedule, datetime.datetime, JobRun]] = []
        # A fire another holder left first: it is older than any fire, and a
        # host that is always busy with the job's fires must not starve it.
        self._claim_left(won, now)
        retried = {job.job for job, _, _ in won}
        # Each host in its own order: most claims then find a fire free, or
        # already committed by another host, rather than meet its INSERT.
        looked_at = [job for job in self.jobs if not self._quiet(job, now)]
        random.shuffle(looked_at)
        together: list[tuple[JobSchedule, datetime.datetime, str]] = []
        commands = 0  # Of the fires together: a task's needs no room on this host.
        for job in looked_at:
            if job.job in self.children:
                self._overlapped_here(job, now)
                continue  # Never a second copy of a job this host is running.
            if job.job in self.delayed or job.job in retried:
                continue
            if job.task is None and self._busy(won) + commands >= self.max_jobs:
                continue  # Left for a host with room, or for the next look.
            to_claim = self._to_claim(job, now)
            if not to_claim and job.job not in self.catching_up | self.buffered.keys():
                self._quiet_until_next_fire(job, now)
            if len(to_claim) == 1:
                together.append((job, *to_claim[0]))
                commands += job.task is None
            else:
                self._claim_in_turn(job, to_claim, won)
        self._claim_together(together, won)
        # Every claim first, then the processes: starting one takes longer
        # than a claim, and the other fires' claims need not wait for it.
        for job, fire, run in won:
            if job.task is not None:
                self._enqueued(job, fire, run)
            elif job.jitter and job.job not in retried:
                delay = random.uniform(0, job.jitter.total_seconds())
                self.delayed[job.job] = Delayed(job, fire, run, delay, time.monotonic() + delay)
            else:
                self._start(job, fire, run)

    def _claim_in_turn(
        self,
        job: JobSchedule,
        to_claim: list[tuple[datetime.datetime, str]],
        won: list[tuple[JobSchedule, datetime.datetime, JobRun]],
    ) -> None:
        """Claim ``job``'s fires one at a time, oldest first, until one is won."""
        for fire, key in to_claim:
            self.tried[job.job] = fire
            if self._take_outcome(job, fire, key, self._try_claim(job, key), won):
                return

    def _claim_together(
        self,
        together: list[tuple[JobSchedule, datetime.datetime, str]],
        won: list[tuple[JobSchedule, datetime.datetime, JobRun]],
    ) -> None:
        """Claim the fires due at this look, one each, in a few statements
        for all of them (``JobRun.objects.try_claim_many``): a thousand jobs
        due at one instant cost a losing host two statements, not two
        thousand. A fire the batch left unsettled (its holder died, a pause
        refused it) is claimed alone, by the whole rule.

        The fires of tasks whose queue is in the claims database are claimed
        in a batch of their own, whose transaction holds their messages too
        (``TaskTarget.fire()``); other tasks' messages are sent once the
        batch committed, as a single fire's are.
        """
        in_claims_database: list[tuple[JobSchedule, datetime.datetime, str]] = []
        elsewhere: list[tuple[JobSchedule, datetime.datetime, str]] = []
        for each in together:
            task = each[0].task
            (in_claims_database if task and task.in_claims_database() else elsewhere).append(each)
        self._claim_batch(elsewhere, won)
        self._claim_batch(in_claims_database, won, enqueuing=True)

    def _claim_batch(
        self,
        together: list[tuple[JobSchedule, datetime.datetime, str]],
        won: list[tuple[JobSchedule, datetime.datetime, JobRun]],
        enqueuing: bool = False,
    ) -> None:
        """Claim ``together`` in one batch and take each outcome in. A
        task's fire gets its delay in its queue (its jitter) first, which
        its lease counts; with ``enqueuing`` its message goes in the
        batch's transaction, else each won fire's message is sent after
        the batch committed, and their leases lengthened together."""
        if not together:
            return
        delays = {job.job: job.task.delay(job, True) for job, _, _ in together if job.task}
        fires = [
            Fire(
                job.job,
                key,
                self._batch_lease(job, delays.get(job.job, 0.0)),
                allow_overlap=job.allow_overlap,
                schedule=job.slots.recorded_schedule,
                series=job.series,
            )
            for job, _, key in together
        ]
        by_name = {job.job: job for job, _, _ in together}

        def enqueue(run: JobRun) -> None:
            job = by_name[run.job]
            assert job.task is not None, "only tasks' fires are enqueued"
            job.task.enqueue_or_settle(job, run, delays[run.job])

        outcomes = JobRun.objects.try_claim_many(fires, then=enqueue if enqueuing else None)
        to_send: list[tuple[JobSchedule, JobRun, float]] = []
        for (job, fire, key), outcome in zip(together, outcomes, strict=True):
            self.tried[job.job] = fire
            if outcome is None:
                outcome = self._try_claim(job, key)
            elif isinstance(outcome, JobRun) and job.task and not enqueuing:
                to_send.append((job, outcome, delays[job.job]))
            self._take_outcome(job, fire, key, outcome, won)
        task_schedules.send_messages(to_send)

    @staticmethod
    def _batch_lease(job: JobSchedule, delay: float) -> datetime.timedelta:
        """A fire's lease in a batch, as ``_try_claim()`` claims it alone."""
        start_lease = min(job.lease, START_LEASE)
        if job.task is not None:
            return job.task.claim_lease(start_lease, delay)
        return start_lease + (job.jitter or datetime.timedelta())

    def _take_outcome(
        self,
        job: JobSchedule,
        fire: datetime.datetime,
        key: str,
        outcome: JobRun | Refusal,
        won: list[tuple[JobSchedule, datetime.datetime, JobRun]],
    ) -> bool:
        """Take a claim's outcome in: a fire won, to start; one held back by
        the job's overlap policy; or one that waits no more. Whether won."""
        if isinstance(outcome, JobRun):
            self._ran_after_waiting(job, fire, outcome)
            won.append((job, fire, outcome))
            return True
        if outcome.reason == Reason.OVERLAP and job.overlap in Overlap.holding_back:
            self._hold_back(job, fire, key)
        else:  # Another host won it, a pause refused it: it waits no more.
            self.buffered.pop(job.job, None)
        return False

    def _quiet(self, job: JobSchedule, now: datetime.datetime) -> bool:
        """Whether ``job`` has nothing to claim at ``now`` for sure: it had
        nothing at a look since its latest fire, and no fires to catch up
        wait for a look.

        Between two fires, time only makes a fire older, and an older fire
        is no more due than it was: an idle scheduler looks at each job once
        per fire, not at each wake-up. The fires other holders left are read
        at every look whatever the job (``_claim_left()``).
        """
        until = self.quiet_until.get(job.job)
        waits = job.job in self.catching_up or job.job in self.buffered
        return until is not None and now < until and not waits

    def _quiet_until_next_fire(self, job: JobSchedule, now: datetime.datetime) -> None:
        following = job.cron.next_fire(now)
        if following is None:
            self.quiet_until.pop(job.job, None)
        else:
            self.quiet_until[job.job] = following

    def _next_fire(self, job: JobSchedule, now: datetime.datetime) -> datetime.datetime | None:
        """The first fire of ``job`` after ``now``: known already for a quiet job."""
        until = self.quiet_until.get(job.job)
        return until if until is not None and now < until else job.cron.next_fire(now)

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

    def _busy(self, won: list[tuple[JobSchedule, datetime.datetime, JobRun]]) -> int:
        """How many of ``max_jobs`` this host uses: its processes, started or
        waiting out their jitter, and the commands' fires it just won."""
        return len(self.children) + len(self.delayed) + sum(job.task is None for job, _, _ in won)

    def _enqueued(self, job: JobSchedule, fire: datetime.datetime, run: JobRun) -> None:
        """Say how a task fire's enqueue went. One that no worker adopts before
        its lease ends is enqueued again, as a retry is (``_claim_retries()``)."""
        late = (run.claimed_at - fire).total_seconds()
        if run.status != JobRun.Status.RUNNING:
            self.warn(f"Could not enqueue {_fire(job, run)}: {run.error}; it is {run.status}")
            return
        self.say(
            f"Enqueued {_fire(job, run)}: attempt {run.attempt}, "
            f"claimed {late:.3f} s after its fire time"
        )

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
                f"{_exited(child.process, code)} after {took:.1f} s{note}"
            )

    def watch(self) -> None:
        """Keep the claim of each child that has not adopted it yet
        (``keep_for_adoption()``); stop each child past its job's timeout,
        or whose run an operator cancelled (one read, of the rows of the
        children): SIGTERM, then SIGKILL once its grace is over, if it still
        runs."""
        if not self.children:
            return
        self.keep_for_adoption()
        now = time.monotonic()
        cancelled = cancels.cancelled_among(child.run for child in self.children.values())
        for child in self.children.values():
            if child.stopped is None and child.run.pk in cancelled:
                child.stop(JobRun.Status.CANCELLED)
                self.warn(f"Cancelled {child.run}: sent pid {child.process.pid} SIGTERM")
            elif child.stopped is None and child.past_timeout(now):
                child.stop(JobRun.Status.TIMED_OUT)
                child.timed_out_at = _read_now(child.run)
                self.warn(
                    f"{child.run} reached its timeout of {child.job.timeout}: sent pid "
                    f"{child.process.pid} SIGTERM"
                )
            else:
                self._kill_if_past_grace(child, now)

    def _kill_if_past_grace(self, child: Child, now: float) -> None:
        if child.kill_if_past_grace(now):
            self.warn(
                f"{child.run} still ran {child.job.timeout_grace} after its {child.sent}: "
                f"sent pid {child.process.pid} SIGKILL"
            )

    def keep_for_adoption(self) -> None:
        """Renew the start lease of each live child that has not adopted its
        claim, every third of it, as its heartbeat would.

        A job's process may take longer to import and set up than its start
        lease: the claim is kept for it meanwhile, by a compare-and-set on
        the claim's token and on the lease this scheduler set last. The
        first renewal that finds the lease renewed by the process (it
        adopted the claim) or ended (an operator cancelled or expired it)
        ends the keeping: from then on the lease is the process's alone,
        its ``max_run_time`` included, so the claim never has two keepers
        that disagree, and no run of the fire but this one holds it.
        """
        for child in self.children.values():
            if child.adopted or child.process.poll() is not None:
                continue
            lease = min(child.job.lease, START_LEASE)
            if child.run.held_for() > lease.total_seconds() - leases.renewal_interval(lease):
                continue
            until = lease_deadline(child.run, child.job.max_run_time)
            child.adopted = not child.run.renew(lease, until=until, unless_renewed=True)

    def _settle(self, child: Child, code: int) -> str:
        """Settle a child's fire by how it ended (``jobclaims.running.attempts``), and say how."""
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
            # Its process is gone, however it ended: the window may be rerun.
            cancels.let_go(run)
            return "; cancelled by an operator"  # Its row says so, and by whom.
        if child.stopped == JobRun.Status.TIMED_OUT:
            timeout = child.job.timeout
            assert timeout is not None, "only a job with a timeout is stopped at one"
            why = f"Timed out after {timeout}: its scheduler sent it SIGTERM."
            if code == -signal.SIGKILL:
                why = timeouts.killed_message(timeout, child.job.timeout_grace, "its scheduler")
            elif code == 0:
                why = (
                    f"Timed out after {timeout}: its scheduler sent it SIGTERM, and its run "
                    "returned (its own SIGTERM handler stopped it), so its success is not counted."
                )
            status = attempts.after_timeout(run, child.job.retry, why, child.timed_out_at)
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

    def shutdown(self, wakeup: Wakeup | None = None) -> None:
        """Give running jobs the grace to end, then pass the stop signal on,
        and wait for them to end. A fire still waiting out its jitter is
        handed off at once to the next scheduler that looks: it never started.

        ``wakeup``, the stop signals' (``_stop_on_signals()``), ends the
        grace's waits at a second signal."""
        pause = time.sleep if wakeup is None else wakeup.wait
        self.stopping.set()
        self.say_signalled()
        for each in self.delayed.values():
            if attempts.hand_off(each.run, "Its scheduler stopped before its jitter was over."):
                self.say(f"Handed {each.run} off to the next scheduler: it had not started yet")
        self.delayed.clear()
        if self.signum is not None:
            deadline = time.monotonic() + self.grace.total_seconds()
            # Until a second signal passes the stop on to every job.
            while self._not_interrupted() and time.monotonic() < deadline:
                self.reap()
                self.watch()
                self.say_signalled()
                pause(min(POLL / 10, max(deadline - time.monotonic(), 0)))
            self.pass_on(self.signum)
        # A job that ignores the signal passed on is killed after its grace:
        # it must not keep its fire from the next scheduler forever.
        while self.children:
            self.reap()
            now = time.monotonic()
            for child in self.children.values():
                self._kill_if_past_grace(child, now)
            self.say_signalled()
            if self.children:
                time.sleep(POLL / 10)
        self.say_signalled()

    def _not_interrupted(self) -> bool:
        """Whether a running job has not had the stop signal passed on yet."""
        return any(not child.interrupted for child in self.children.values())

    def say_signalled(self) -> None:
        """Say what the stop signals that came asked to be said, in order."""
        while self.signalled:
            self.say(self.signalled.popleft())

    def pass_on(self, signum: int) -> None:
        """Send ``signum`` to every running job not sent one yet."""
        for child in list(self.children.values()):
            if not child.interrupted and child.process.poll() is None:
                child.interrupted = True
                child.signal(signum)

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
        if (waiting := self._waiting(job, fire)) is not None:
            return waiting
        if fire is None or self.tried.get(job.job) == fire or fire < self._oldest_due(job, now):
            return []
        key = job.slots.key_at(fire)
        if now - fire > ON_TIME and self._settled_or_held(job, key):
            # A late look (a start, --once from cron): one read, rather than
            # a claim refused and a skip recorded for a fire long settled.
            self.tried[job.job] = fire
            return []
        return [(fire, key)]

    def _waiting(
        self, job: JobSchedule, due: datetime.datetime | None
    ) -> list[tuple[datetime.datetime, str]] | None:
        """The fire ``job``'s overlap policy holds back, to try now: it, once
        no run of another window holds the job; nothing while one does (one
        indexed read). None when no fire waits, or a newer one is due, which
        takes its place: at most one fire waits."""
        waiting = self.buffered.get(job.job)
        if waiting is None:
            return None
        fire, key = waiting
        if due is not None and due > fire:
            del self.buffered[job.job]
            self.say(f"Skipped {job.job} {key}: the fire of {job.slots.key_at(due)} waits instead")
            return None
        held = JobRun.objects.using(self.db).filter(
            job=job.job, holds_job__isnull=False, expires_at__gt=DatabaseNow()
        )
        return [] if held.exclude(window=key).exists() else [waiting]

    def _overlapped_here(self, job: JobSchedule, now: datetime.datetime) -> None:
        """A fire of ``job`` came due while this host's run of an earlier one
        holds the job: it is skipped, held back, or replaces that run, as
        other hosts' claims of it, refused for the overlap, make it. Without
        this, the fire would look missed once the run ended here, and run
        late. Jobs that allow overlap run it on another host."""
        fire = job.due(now)
        if job.overlap == Overlap.ALLOW or fire is None or self.tried.get(job.job) == fire:
            return
        key = job.slots.key_at(fire)
        if key == self.children[job.job].run.window:
            return
        self.tried[job.job] = fire
        if job.overlap in Overlap.holding_back:
            self._hold_back(job, fire, key)

    def _hold_back(self, job: JobSchedule, fire: datetime.datetime, key: str) -> None:
        """A run of an earlier fire holds the job: cancel that run
        ("replace"), and let the fire wait for it to end ("buffer" too)."""
        if job.overlap == Overlap.REPLACE:
            replaced = JobRun.objects.using(self.db).filter(
                job=job.job, holds_job__isnull=False, status=JobRun.Status.RUNNING
            )
            by = f"jobclaims_scheduler, replacing it with the fire of {key} (overlap = replace)"
            if replaced.exclude(window=key).cancel(by):
                self.say(f"Cancelled the run of {job.job} before {key}: overlap = replace")
        if job.job not in self.buffered:
            self.say(
                f"Holding {job.job} {key} back until the run before it ends "
                f"(overlap = {job.overlap})"
            )
        self.buffered[job.job] = (fire, key)

    def _ran_after_waiting(self, job: JobSchedule, fire: datetime.datetime, run: JobRun) -> None:
        """Let the fire that waited go, now that it won its claim, and
        record on its run the policy it waited by: the admin and the run's
        history tell why it started late. One write, for such a fire only.

        The host that wins the fire may not be one that held it back: one
        whose look came once the run before it had ended (a loaded host
        wakes late) claims it outright. It records the policy too when a
        run of another fire was still going at this fire's time (one read,
        for the jobs whose policy holds fires back)."""
        if (waiting := self.buffered.get(job.job)) is not None and waiting[0] == fire:
            del self.buffered[job.job]
        elif job.overlap not in Overlap.holding_back or not self._overlapped(job, fire, run):
            return
        run.overlap = job.overlap
        JobRun.objects.using(self.db).filter(pk=run.pk).update(overlap=job.overlap)

    def _overlapped(self, job: JobSchedule, fire: datetime.datetime, run: JobRun) -> bool:
        """Whether a run of another of ``job``'s fires was going at ``fire``:
        claimed before it, and ended after it."""
        return (
            JobRun.objects.using(self.db)
            .filter(job=job.job, claimed_at__lt=fire, finished_at__gt=fire)
            .exclude(window=run.window)
            .exists()
        )

    def _claim_left(
        self, won: list[tuple[JobSchedule, datetime.datetime, JobRun]], now: datetime.datetime
    ) -> None:
        """Claim the fires other holders left, of jobs this host has room
        for, oldest first: due retries, and fires whose holder vanished.

        Every scheduler looks at each look, so a fire handed off by a
        stopping host runs again at once, and a failed one when its backoff
        ends, on one host. So does a fire whose holder vanished without an
        outcome (a scheduler killed between its claim and its job's start, a
        host lost with the job running): once its lease ends, however many
        newer fires came since, if the job's misfire policy runs a missed
        fire of its age (``JobSchedule.takes_over()``). The rows are read,
        not remembered, so that a ``--once`` from cron takes it over too.

        A fire claimed under an earlier name of a schedule (its series is
        the schedule's: ``jobclaims.claims.naming``) is taken over under that
        name, so that a rolling deploy that renames a schedule loses none
        that the old code's hosts handed off or left.
        """
        busy = set(self.children) | set(self.delayed) | {job.job for job, _, _ in won}
        room = self.max_jobs - self._busy(won)
        # A task's fire is enqueued, so it needs no room on this host.
        if (room < 1 and not self.tasks) or len(busy) >= len(self.by_name):
            return
        # Every job's left fires, the others' left out here: the (status,
        # expires_at) index finds the few rows waiting for a retry or whose
        # lease ended, where a list of every job's name and series would be
        # sent, and parsed, at each look.
        left = (
            (JobRun.objects.due_retries() | JobRun.objects.expired())
            .order_by(Coalesce("retry_at", "expires_at"))
            .values_list("job", "window", "status", "series")
        )
        for name, key, status, series in list(left):
            if name in busy:
                continue  # One attempt of a job at a time on this host.
            # Not one of its names: the read matched it by its series.
            schedule = self.by_name.get(name) or self.by_series.get(str(series))
            if schedule is None or (schedule.task is None and room < 1):
                continue  # Another host's job, or no room for its process here.
            retry = status == JobRun.Status.RETRYING
            fire = None if retry else schedule.fire_of(key)
            if not retry and (
                fire is None
                or fire < self._oldest_due(schedule, now)
                or not schedule.takes_over(fire, now)
            ):
                continue
            if (job := schedule.under(name)) is None:
                continue  # A name of another job: its process would not adopt it.
            if (run := self._claim(job, key, retry=retry)) is not None:
                busy.add(name)
                won.append((job, fire or run.claimed_at, run))
                room -= job.task is None

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

    def _oldest_due(self, job: JobSchedule, now: datetime.datetime) -> datetime.datetime:
        """The oldest fire ``job``'s schedule had due: the one on time as it
        came into force (``JobSchedule.oldest_due()``). Anything older was
        never due, so never missed.

        The schedule is in force here from the look that first used it,
        ``now``, if that look read the clock before the schedule was
        recorded: else a ``--once`` that recorded it just after a fire's
        instant would find the fire it was started for "never due"."""
        if job.job not in self.in_force:
            since = min(schedule_versions.in_force_since(job), now)
            self.in_force[job.job] = job.oldest_due(since)
        return self.in_force[job.job]

    def _unclaimed(
        self, job: JobSchedule, now: datetime.datetime
    ) -> list[tuple[datetime.datetime, str]]:
        """Fires since the newest fire claimed that no claim holds, oldest
        first, none from before the schedule came into force."""
        oldest = self._oldest_due(job, now)
        runs = JobRun.objects.filter(job=job.job)
        # The newest fire claimed, not the newest claim: a backfill of an old
        # window, claimed last, must not send the look back to before it.
        newest = runs.order_by(F("slot_start").desc(nulls_last=True), "-claimed_at").first()
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
        run = self._try_claim(job, key, retry=retry)
        return None if isinstance(run, Refusal) else run

    def _try_claim(self, job: JobSchedule, key: str, *, retry: bool = False) -> JobRun | Refusal:
        """``_claim()``, saying why a refused claim was refused."""

        def claim(lease: datetime.timedelta) -> JobRun | Refusal:
            # A losing host says nothing of its refusals: it needs no details.
            return JobRun.objects.try_claim(
                job.job,
                key,
                lease=lease,
                allow_overlap=job.allow_overlap,
                schedule=job.slots.recorded_schedule,
                series=job.series,
                details=False,
                take_failed=retry,
            )

        start_lease = min(job.lease, START_LEASE)
        if job.task is not None:
            # Its start is an enqueue, which the target makes as it claims
            # (in one transaction where the queue is in the claims database).
            run = job.task.fire(job, claim, start_lease=start_lease, jittered=not retry)
        else:
            run = claim(start_lease + (job.jitter or datetime.timedelta()))
        return run

    def _start(
        self, job: JobSchedule, fire: datetime.datetime, run: JobRun, delay: float | None = None
    ) -> None:
        """Start the job's process under ``run``, or record the claim failed."""
        late = (run.claimed_at - fire).total_seconds()
        try:
            process = self.launcher.start(job, run, self.verbosity)
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
        """Seconds until the next fire of any job, or the next look for fires
        other holders left, by the database clock."""
        upcoming = [self._next_fire(job, now) for job in self.jobs]
        soonest = min((fire for fire in upcoming if fire is not None), default=None)
        wait = 3600.0 if soonest is None else (soonest - now).total_seconds()
        # Fires other holders left are looked for this often, so that a fire
        # a stopping host handed off runs again at once, and one whose
        # holder vanished soon after its lease ends.
        wait = min(wait, WATCH if self.children else POLL)
        if self.delayed:
            wait = min(wait, self._until_delayed())
        # A little past the fire, so the database clock has reached it too.
        return max(wait, 0) + 0.002

    @contextmanager
    def _stop_on_signals(self) -> Iterator[Wakeup]:
        """Take SIGTERM and SIGINT while the block runs; what the block
        waits on, which a signal wakes."""
        wakeup = Wakeup()
        try:
            if threading.current_thread() is threading.main_thread():
                with self._handling_stops(wakeup):
                    yield wakeup
            else:
                yield wakeup
        finally:
            wakeup.close()

    @contextmanager
    def _handling_stops(self, wakeup: Wakeup) -> Iterator[None]:
        def stop(signum: int, frame: object) -> None:
            # The handler runs between two of the main thread's bytecodes,
            # maybe inside its write to stdout, which a second write would
            # break (a reentrant call): it leaves what to say to that thread.
            # Maybe inside a lock's hold too: it takes none (``Wakeup``).
            name = signal.Signals(signum).name
            if self.signum is not None:
                self.pass_on(signum)
                self.signalled.append(f"{name} again: passing it on to the running jobs")
                wakeup.wake()
                return
            self.signum = signum
            if self.children:
                self.signalled.append(
                    f"Stopping on {name}: no new jobs start; the running ones have "
                    f"{self.grace.total_seconds():g} s to finish"
                )
            else:
                self.signalled.append(f"Stopping on {name}: no new jobs start")
            wakeup.wake()

        previous = {
            signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            yield
        finally:
            # A process that ends with its scheduler ignores the rest of a
            # burst of stop signals once it stopped: one landing after the
            # hand-off, at the default action, would have it end killed.
            ending = self.ends_process and self.signum is not None
            for signum, handler in previous.items():
                signal.signal(signum, signal.SIG_IGN if ending else handler)


def _fire(job: JobSchedule, run: JobRun) -> str:
    """A fire as the scheduler's messages show it: its job, key and zone."""
    return f"{run.job} {run.window} ({job.time_zone})"


def _exited(process: JobProcess, code: int) -> str:
    if isinstance(process, ForkedProcess) and process.status_lost:
        return "ended (its exit status was lost: its fork server died before it)"
    return f"exited {code}"


def _read_now(run: JobRun) -> datetime.datetime | None:
    """The database clock's now, or None if the database does not answer."""
    try:
        return database_now(run._state.db or "default")
    except DatabaseError:
        return None
