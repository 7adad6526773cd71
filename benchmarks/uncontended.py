"""One process claiming and releasing new windows, beside the raw floor:
through ``JobRun.objects.claim()``, and through every other public way in."""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable
from time import perf_counter_ns, thread_time_ns
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.test.utils import CaptureQueriesContext

from benchmarks.floor import RawCycles
from benchmarks.timing import Cycle, Timings, interleaved, round_trips, verb
from jobclaims.jobs.claiming import claim, claimed
from jobclaims.models import JobRun
from jobclaims.time.slots import Slots

LEASE = datetime.timedelta(minutes=10)

#: Numbers the claims' windows, so that each claim is of a new window.
_windows = itertools.count()


class ClaimCycles:
    """Timed claim-and-release cycles of one job, each on a new window.

    A new window each time is what a scheduled job does all its life: one
    claim per tick, on a window nobody has claimed yet. Each cycle reports
    its wall-clock time and the CPU time this process spent in it: the
    client's own work, which a busy machine stretches in wall-clock time.
    """

    def __init__(self, job: str):
        self.job = job

    def claim_and_release(self) -> dict[str, int]:
        window = f"w-{next(_windows)}"
        cpu = thread_time_ns()
        start = perf_counter_ns()
        run = JobRun.objects.claim(self.job, window, lease=LEASE)
        claimed = perf_counter_ns()
        if run is None:
            raise RuntimeError(f"the claim of the new window {window} was refused")
        if not run.release():
            raise RuntimeError(f"the release of {run} changed no row")
        return {
            "claim": claimed - start,
            "cycle": perf_counter_ns() - start,
            "cpu": thread_time_ns() - cpu,
        }


#: Numbers the jobs of the ways in that claim the current window, so that
#: each of their claims is of a job nobody has claimed yet.
_jobs = itertools.count()

#: The scheduler's fires: one a minute, from a minute nobody has claimed.
_FIRES = Slots.of_window("minutely")
_FIRST_FIRE = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)


def timed(prepare: Callable[[], Callable[[], object]]) -> Cycle:
    """A cycle that times one claim + release: ``prepare()`` (not timed)
    returns the call that claims a new window, runs nothing and releases it."""

    def cycle() -> dict[str, int]:
        call = prepare()
        cpu = thread_time_ns()
        start = perf_counter_ns()
        call()
        return {"cycle": perf_counter_ns() - start, "cpu": thread_time_ns() - cpu}

    return cycle


def public_paths() -> dict[str, Cycle]:
    """Each public way in beside ``JobRun.objects.claim()``, as timed cycles.

    The ways that claim the current window (``claim()``, ``@claimed``,
    ``ClaimedTask``, a ``JobCommand``) claim it for a new job each time;
    the scheduler's claim, a fire of its own a minute later each time.
    Each path's own preparation (a function decorated, a task defined) is
    not timed; the database clock's read of the current window is.
    """
    paths = {
        "claim() context manager": timed(_context_manager),
        "@claimed": timed(_decorated),
        "scheduler's claim": timed(_scheduler_claim),
        "JobCommand (call_command)": timed(_job_command),
    }
    if (task := _claimed_task()) is not None:
        paths["ClaimedTask"] = timed(task)
    return paths


#: Each way in whose cycle includes a framework's own call, and that call
#: alone (``host_calls()``): what Django or Celery costs it, claim or none.
HOSTS = {
    "JobCommand (call_command)": "call_command, no claim",
    "ClaimedTask": "Celery task call, no claim",
}


def host_calls() -> dict[str, Cycle]:
    """The calls of ``HOSTS`` without jobclaims, as timed cycles: a plain
    command through ``call_command`` (which builds its parser each time, as
    no process started by cron or the scheduler does more than once), and a
    plain Celery task called as ``ClaimedTask`` is."""
    from django.core.management import call_command

    calls = {"call_command, no claim": timed(lambda: lambda: call_command("fleet_plain", name="x"))}
    if (task := _plain_task()) is not None:
        calls["Celery task call, no claim"] = timed(task)
    return calls


def _context_manager() -> Callable[[], object]:
    job = f"context-{next(_jobs)}"

    def call() -> None:
        with claim(job, window="minutely", lease=LEASE):
            pass

    return call


def _decorated() -> Callable[[], object]:
    return claimed(f"decorated-{next(_jobs)}", window="minutely", lease=LEASE)(lambda: None)


def _scheduler_claim() -> Callable[[], object]:
    """As ``Scheduler._claim()`` claims a fire, released as its run would."""
    key = _FIRES.key_at(_FIRST_FIRE + datetime.timedelta(minutes=next(_windows)))

    def call() -> None:
        run = JobRun.objects.try_claim(
            "scheduled", key, lease=LEASE, schedule=_FIRES.recorded_schedule, details=False
        )
        if not isinstance(run, JobRun):
            raise RuntimeError(f"the scheduler's claim of the new fire {key} was refused: {run}")
        run.release()

    return call


def _job_command() -> Callable[[], object]:
    from django.core.management import call_command

    job = f"command-{next(_jobs)}"
    return lambda: call_command("fleet_job", name=job, verbosity=0)


def _nothing() -> None:
    """A task's body: the claim is what is timed (Celery needs a named function)."""


def _claimed_task() -> Callable[[], Callable[[], object]] | None:
    """A Celery task of ``ClaimedTask`` per claim, called as a worker calls
    it; ``None`` without Celery."""
    try:
        from jobclaims.contrib.celery import ClaimedTask
    except ImportError:
        return None
    return _new_tasks("task", base=ClaimedTask, claim_window="minutely", claim_lease=LEASE)


def _plain_task() -> Callable[[], Callable[[], object]] | None:
    """``_claimed_task()``'s tasks as plain Celery tasks, a new one per
    call as there, so that each pays a task's first call as a claimed one
    does; ``None`` without Celery."""
    return _new_tasks("plain")


def _new_tasks(prefix: str, **options: Any) -> Callable[[], Callable[[], object]] | None:
    """Makes a new Celery task of ``_nothing`` per call, named ``prefix``
    and a number, with ``options``; ``None`` without Celery."""
    try:
        from celery import Celery
    except ImportError:
        return None
    app = Celery(f"{prefix}-calls", set_as_current=False)

    def prepare() -> Callable[[], object]:
        call: Callable[[], object] = app.task(name=f"{prefix}-{next(_jobs)}", **options)(_nothing)
        return call

    app.finalize()
    return prepare


def claim_against_floor(
    connection: BaseDatabaseWrapper,
    claims: ClaimCycles,
    *,
    rounds: int,
    per_round: int,
    warmup: int,
    seconds: float,
    paths: dict[str, Cycle] | None = None,
) -> Timings:
    """Time ``SELECT 1``, the raw claim and ``claim()`` in alternating rounds,
    and each of ``paths`` in the same rounds."""
    raw = RawCycles(connection, LEASE)
    try:
        return interleaved(
            {
                "round_trip": raw.round_trip,
                "floor": raw.claim_and_release,
                "claim": claims.claim_and_release,
                **(paths or {}),
            },
            rounds=rounds,
            per_round=per_round,
            warmup=warmup,
            seconds=seconds,
        )
    finally:
        raw.close()


def statements_per_cycle(connection: BaseDatabaseWrapper, claims: ClaimCycles) -> dict[str, Any]:
    """What one cycle sends: the statements Django logs, and the round trips."""
    floor = RawCycles(connection, LEASE)
    try:
        with round_trips(connection) as floor_trips:
            floor.claim_and_release()
    finally:
        floor.close()
    with CaptureQueriesContext(connection) as captured, round_trips(connection) as claim_trips:
        claims.claim_and_release()
    return {
        "statements": len(captured),
        "sequence": [verb(query["sql"]) for query in captured],
        "round_trips": claim_trips(),
        "floor_round_trips": floor_trips(),
    }


def statements_of(connection: BaseDatabaseWrapper, cycle: Cycle) -> list[str]:
    """The verbs of the statements one cycle sends on ``connection``."""
    with CaptureQueriesContext(connection) as captured:
        cycle()
    return [verb(query["sql"]) for query in captured]


def figures(timed: Timings, name: str, statements: list[str]) -> dict[str, Any]:
    """A timed way's figures as the results hold them: what it sends, its
    claim + release, its client CPU, and its ratio to the floor."""
    return {
        "statements": statements,
        "claim_and_release": timed.samples(name, "cycle").summary(),
        "cpu": timed.samples(name, "cpu").summary(),
        "ratio_to_floor": round(timed.ratio(name, "floor"), 2),
    }
