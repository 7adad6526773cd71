"""History kept bounded by the schedulers themselves: one pass per period on
one host, within the bounds, each DELETE short, never reopening a slot."""

from __future__ import annotations

import datetime
import itertools
import json
import re
import signal
import time
from collections import Counter

import pytest
from django.db import connection
from django.db.models import Max, Q
from django.test import override_settings

from benchmarks import history
from jobclaims import testing
from jobclaims.claims.rule import State
from jobclaims.models import JobRun, JobSkip
from jobclaims.monitoring.health import job_health, read_health
from jobclaims.scheduling import retention
from jobclaims.scheduling.retention import RETENTION_JOB
from jobclaims.testing import schedules_in_force_since
from jobclaims.time.clock import database_now
from tests.support.factories import claim_in_state
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

DAY = datetime.timedelta(days=1)
MINUTE = datetime.timedelta(minutes=1)
BOUNDS = {
    "RETENTION_EVERY": datetime.timedelta(minutes=10),
    "HISTORY_MAX_AGE": datetime.timedelta(days=30),
    "HISTORY_MAX_ROWS_PER_JOB": 100,
}


def skips(job: str, count: int, age: datetime.timedelta) -> None:
    now = database_now()
    JobSkip.objects.bulk_create(
        JobSkip(
            job=job, window=f"s-{n}", owner="h", reason="held", skipped_at=now - age - n * MINUTE
        )
        for n in range(count)
    )


def guarding() -> set[int]:
    """The rows that guard each job's latest window, as pruning's rule says:
    per job and schedule, the finished row of its greatest key, and the one
    claimed last."""
    finished = JobRun.objects.finished()
    groups = finished.values("job", "schedule").annotate(
        latest=Max("window"), last=Max("claimed_at")
    )
    keys = set()
    for group in groups:
        of_group = finished.filter(job=group["job"], schedule=group["schedule"])
        keys |= set(
            of_group.filter(Q(window=group["latest"]) | Q(claimed_at=group["last"])).values_list(
                "pk", flat=True
            )
        )
    return keys


@override_settings(JOBCLAIMS=BOUNDS)
def test_a_pass_prunes_by_age_and_count_keeping_guards_and_the_look_back():
    history.fill(connection, 2000, "bench")  # A month and more old, over 51 jobs.
    # A busy job: 150 runs in the look-back (a day), 200 older but younger than the age.
    for n in range(150):
        claim_in_state(
            State.SUCCEEDED, "busy", f"w-{n:04d}", age=datetime.timedelta(hours=1) + n * MINUTE
        )
    for n in range(200):
        claim_in_state(State.SUCCEEDED, "busy", f"old-{n:04d}", age=2 * DAY + n * MINUTE)
    skips("busy", 300, 2 * DAY)
    skips("gone_by_age", 10, 40 * DAY)
    held = claim_in_state(State.ACTIVE, "bench", "h-running")
    kept = guarding() - set(JobRun.objects.filter(job="busy").values_list("pk", flat=True))

    key = retention.due_pass()
    assert key is not None
    pruned = retention.run_pass(key)
    assert pruned is not None
    assert not pruned.stopped

    # Each old job keeps the rows guarding its latest window, however old,
    # and running rows stay.
    old = JobRun.objects.exclude(job__in=["busy", RETENTION_JOB])
    assert set(old.values_list("pk", flat=True)) == kept | {held.pk}
    # By count: the newest 100, but never a row of the look-back.
    assert set(JobRun.objects.filter(job="busy").values_list("window", flat=True)) == {
        f"w-{n:04d}" for n in range(150)
    }
    assert JobSkip.objects.filter(job="busy").count() == 100
    assert not JobSkip.objects.filter(job="gone_by_age").exists()
    assert (pruned.runs, pruned.skips) == (2000 - len(kept) + 200, 200 + 10)

    run = JobRun.objects.get(job=RETENTION_JOB)
    assert run.status == JobRun.Status.SUCCEEDED
    assert run.schedule == "600-second"
    assert run.output is not None
    assert run.output.startswith(
        f"Deleted {pruned.runs:,} finished runs and {pruned.skips:,} skips"
    )
    assert "Bounds: older than 30 d; at most 100 finished runs and skips per job" in run.output
    # Another host's claim of the same period is refused: one pass per period.
    assert retention.run_pass(key) is None
    assert JobSkip.objects.get(job=RETENTION_JOB).count == 1


@override_settings(JOBCLAIMS=BOUNDS)
def test_a_stopped_pass_records_what_it_did_and_a_dead_one_is_taken_over():
    history.fill(connection, 3000, "bench")
    kept = guarding()
    asked = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2

    pruned = retention.run_pass(retention.slots().key_at(database_now()), stop)
    assert pruned is not None
    assert pruned.stopped
    assert pruned.statements == 2
    run = JobRun.objects.get(job=RETENTION_JOB)
    assert run.status == JobRun.Status.SUCCEEDED
    assert run.output is not None
    assert "Stopped after deleting" in run.output
    assert "Its scheduler stopped; the next pass goes on." in run.output

    # A pass whose scheduler was killed: its lease ran out, with no outcome.
    earlier = retention.slots().key_at(database_now() - 20 * MINUTE)
    dead = claim_in_state(State.EXPIRED, RETENTION_JOB, earlier, schedule="600-second")
    assert retention.due_pass(tried="anything") == dead.window
    assert retention.run_pass(dead.window) is not None
    dead.refresh_from_db()
    assert (dead.status, dead.attempt) == (JobRun.Status.SUCCEEDED, 2)
    assert set(JobRun.objects.exclude(job=RETENTION_JOB).values_list("pk", flat=True)) == kept


def test_health_watches_the_passes_over_two_periods_and_not_while_retention_is_off():
    now = database_now()
    with override_settings(JOBCLAIMS=BOUNDS):
        periods = retention.slots()

        def passed(ago: datetime.timedelta) -> JobRun:
            key = periods.key_at(now - ago)
            return claim_in_state(
                State.SUCCEEDED, RETENTION_JOB, key, age=ago, schedule="600-second"
            )

        passed(3 * datetime.timedelta(hours=1))
        last = passed(15 * MINUTE)
        # One period without a pass (a deploy, a pass that ran long) is no
        # alarm, and a period no scheduler claimed is not missed.
        (health,) = job_health(RETENTION_JOB)
        assert health.healthy, health.problems
        last.delete()
        (health,) = job_health(RETENTION_JOB)
        assert health.kinds == ["overdue"], health.problems
    with override_settings(JOBCLAIMS={**BOUNDS, "RETENTION_EVERY": None}):
        assert RETENTION_JOB not in [each.job for each in read_health().jobs]


def retention_passes() -> list[JobRun]:
    return list(JobRun.objects.filter(job=RETENTION_JOB).order_by("claimed_at"))


@pytest.mark.xdist_group("fleets")
def test_three_schedulers_keep_history_bounded_as_they_run_fires_never_rerunning_one():
    """A year of history in small: the old rows go within a few passes while
    three schedulers run a fire every 2 s and catch every missed one up
    (misfire "all", from the newest claim); the fires' own rows past the
    age go too, and none of them is ever run again."""
    schedules_in_force_since(DAY)
    history.fill(connection, 30_000, "bench")
    skips("skipper", 3_000, 40 * DAY)
    kept = guarding()
    old = JobRun.objects.exclude(job__in=["tick", RETENTION_JOB])
    bounds = {"age": 12, "look_back": 6, "rows": 100}
    env = {
        "TESTS_RETENTION_EVERY": "2",
        "TESTS_RETENTION_BOUNDS": json.dumps(bounds),
        "TICK_MISFIRE": "all",
    }
    hosts = testing.start("jobclaims_scheduler", "--job", "tick", instances=3, env=env)
    try:
        deadline = time.monotonic() + 60
        while old.count() > len(kept):
            assert time.monotonic() < deadline, "the old history was not pruned in a minute"
            time.sleep(0.5)
        # Fires keep coming, and their rows age past the bound as they do.
        time.sleep(bounds["age"] + 8)
        for host in hosts:
            host.process.send_signal(signal.SIGTERM)
        stopped = database_now()
        results = [host.finish(timeout=60) for host in hosts]
    finally:
        for host in hosts:
            host.stop()
    assert [result.returncode for result in results] == [0, 0, 0], results

    passes = retention_passes()
    assert len(passes) >= 3
    assert {run.status for run in passes} == {JobRun.Status.SUCCEEDED}
    # One host at a time: no two passes overlapped.
    for before, after in itertools.pairwise(passes):
        assert before.finished_at is not None
        assert before.finished_at <= after.claimed_at
    said = [re.search(r"the longest (\d+) ms", run.output or "") for run in passes]
    longest = max(float(found[1]) for found in said if found)
    print(f"\nlongest DELETE of {len(passes)} passes: {longest:.0f} ms")
    assert longest < 2000  # Sized to about 20 ms: far under this, even on a loaded machine.
    assert not JobSkip.objects.filter(job="skipper").exists()

    # Each fire ran exactly once, a pruned one never again.
    charges = Counter(Charge.objects.filter(job="tick").values_list("window", flat=True))
    assert charges
    assert max(charges.values()) == 1
    ticks = JobRun.objects.filter(job="tick")
    assert set(ticks.values_list("window", flat=True)) <= set(charges)
    # A scheduler's child keeps its output too: tick prints nothing.
    succeeded = ticks.filter(status=JobRun.Status.SUCCEEDED)
    assert set(succeeded.values_list("output", flat=True)) == {""}
    pruned = set(charges) - set(ticks.values_list("window", flat=True))
    assert pruned, "no fire's row aged past the bound while the schedulers ran"
    # The fires' rows past the age went as the schedulers ran: a pass every
    # 2 s, and a few seconds' slack for a loaded machine.
    assert not ticks.filter(claimed_at__lt=stopped - datetime.timedelta(seconds=bounds["age"] + 6))
    assert set(old.values_list("pk", flat=True)) == kept
