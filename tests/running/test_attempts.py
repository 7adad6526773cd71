"""A scheduled job's retry policy: validated, and followed the same however many hosts look."""

from __future__ import annotations

import datetime
import itertools
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from jobclaims import checks
from jobclaims.jobs.discovery import scheduled_jobs
from jobclaims.jobs.schedules import JobSchedule
from jobclaims.models import JobRun
from jobclaims.monitoring.health import checked_overview
from jobclaims.running.attempts import RetryPolicy, problems
from jobclaims.scheduling.scheduler import Child, Scheduler
from jobclaims.testing import Instance, StartingLine
from jobclaims.time.clock import database_now
from tests.testapp.management.commands.always_fails import Command as AlwaysFails

SECOND = datetime.timedelta(seconds=1)
#: The hosts of a trial start this long after the fire, as cron's jitter would.
OFFSETS = (0.0, 2.0, 4.0)
TRIALS = 2


def the_job(name: str) -> JobSchedule:
    (job,) = [job for job in scheduled_jobs() if job.command == name]
    return job


def test_each_wait_doubles_up_to_the_cap_with_jitter_no_shorter_than_half():
    policy = RetryPolicy(retries=5, backoff=10 * SECOND, backoff_max=25 * SECOND)
    for failures, full in [(1, 10), (2, 20), (3, 25), (4, 25), (60, 25)]:
        waits = {policy.wait(failures) for _ in range(50)}
        assert all(full / 2 * SECOND <= wait <= full * SECOND for wait in waits)
        assert len(waits) > 1  # Jittered.


@pytest.mark.parametrize(
    ("retries", "backoff", "backoff_max", "message"),
    [
        (-1, SECOND, SECOND, "retries must be a whole number, 0 or more, not -1"),
        ("3", SECOND, SECOND, "retries must be a whole number, 0 or more, not '3'"),
        (True, SECOND, SECOND, "retries must be a whole number, 0 or more, not True"),
        (1, 5, SECOND, "retry_backoff must be a datetime.timedelta of 0 or more, not 5"),
        (1, SECOND, -SECOND, "retry_backoff_max must be a datetime.timedelta of 0 or more"),
        (1, 9 * SECOND, SECOND, "raise retry_backoff_max or shorten retry_backoff"),
    ],
)
def test_a_retry_policy_that_cannot_work_is_refused_naming_the_fix(
    retries, backoff, backoff_max, message
):
    (found,) = problems("nightly", retries, backoff, backoff_max)
    assert found.startswith("nightly: ")
    assert message in found


@pytest.mark.django_db
def test_a_job_with_a_bad_retry_policy_fails_the_check_and_refuses_to_run(monkeypatch):
    monkeypatch.setattr(AlwaysFails, "retries", -2)
    (error,) = checks.check_schedules()
    assert error.id == "jobclaims.W005"
    assert "retries must be a whole number" in error.msg
    with pytest.raises(CommandError, match="retries must be a whole number"):
        call_command("always_fails")
    assert not JobRun.objects.exists()


def settled_by(scheduler: Scheduler, run: JobRun, argv: list[str]) -> JobRun:
    """Let ``scheduler`` settle ``run`` after a process of ``argv`` ended."""
    process = subprocess.Popen(argv)
    process.wait()
    scheduler.children[run.job] = Child(scheduler.jobs[0], run, process)
    scheduler.reap()
    run.refresh_from_db()
    return run


@pytest.mark.django_db(transaction=True)
def test_a_job_killed_outright_is_retried_after_the_backoff_until_its_retries_are_spent():
    job = the_job("always_fails")
    scheduler = Scheduler([job], max_jobs=1, say=print)
    killed = [sys.executable, "-c", f"import os; os.kill(os.getpid(), {signal.SIGKILL})"]
    run = JobRun.objects.claim(job.job, "2026-11-29T10:00:00+00:00", lease=job.lease)
    assert run is not None
    for failures in range(1, job.retry.retries + 1):
        before = database_now()
        run = settled_by(scheduler, run, killed)
        assert (run.status, run.failures) == (JobRun.Status.RETRYING, failures)
        assert run.retry_at is not None
        assert run.retry_at >= before + job.retry.wait(failures) / 4
        assert "exited with status -9 without recording" in run.error
        # Not yet failed to the health checks: its retries are not spent.
        assert not any("failed" in problem for problem in checked_overview(job, before).problems)
        JobRun.objects.filter(pk=run.pk).update(retry_at=before)  # Due now.
        retried = scheduler._claim(job, run.window, retry=True)
        assert retried is not None
        run = retried
    run = settled_by(scheduler, run, killed)
    assert (run.status, run.failures, run.attempt) == (JobRun.Status.FAILED, 4, 4)
    assert run.retry_at is None


@pytest.mark.django_db(transaction=True)
def test_a_scheduler_that_looks_at_a_failed_fire_leaves_it_to_the_retry_policy():
    job = the_job("always_fails")
    fire = job.cron.latest_fire(database_now())
    assert fire is not None
    run = JobRun.objects.claim(job.job, job.slots.key_at(fire), lease=job.lease)
    assert run is not None
    run.release(JobRun.Status.FAILED, error="RuntimeError: the ledger is closed")
    scheduler = Scheduler([job], max_jobs=1, say=print)

    scheduler.start_due(fire + SECOND)

    assert scheduler.children == {}
    run.refresh_from_db()
    assert (run.status, run.attempt) == (JobRun.Status.FAILED, 1)


def hosts_at_the_line(count: int, attempts: Path) -> list[tuple[StartingLine, Instance]]:
    """``--once`` schedulers, set up and connected, each held at its own line."""
    held = []
    for _ in range(count):
        line = StartingLine()
        instance = Instance(
            "jobclaims_scheduler",
            *("--once", "--job", "always_fails"),
            line=line,
            env={"ATTEMPTS_FILE": str(attempts)},
        )
        held.append((line, instance))
    for _, instance in held:
        instance.wait_ready()
    return held


def sleep_until(moment: datetime.datetime) -> None:
    """Wait for the database clock to reach ``moment``: a fire time, not a state."""
    time.sleep(max((moment - database_now()).total_seconds(), 0))


@pytest.mark.xdist_group("fleets")
@pytest.mark.django_db(transaction=True)
def test_once_on_three_hosts_at_a_failing_fire_runs_it_once_per_attempt_the_policy_allows(
    tmp_path,
):
    attempts = tmp_path / "attempts"
    job = the_job("always_fails")
    held = hosts_at_the_line(len(OFFSETS) * TRIALS, attempts)
    try:
        fire = next(job.cron.fires_after(database_now() + SECOND))
        fires = [fire + trial * 15 * SECOND for trial in range(TRIALS)]
        lines = iter(held)
        for trial_fire in fires:
            for offset in OFFSETS:
                line, _ = next(lines)
                sleep_until(trial_fire + offset * SECOND)
                line.release()
        # Four attempts, each a process start and a failure, and their
        # backoffs: a minute on an idle machine, more beside a loaded one's
        # other fleets. A bound against a hang, not a timing.
        results = [instance.finish(timeout=180) for _, instance in held]
    finally:
        for line, instance in held:
            line.release()
            instance.stop()
    assert [result.returncode for result in results] == [0] * len(held), results

    by_window = defaultdict(list)
    for line in attempts.read_text().splitlines():
        window, attempt, _, at = line.split()
        by_window[window].append((int(attempt), float(at)))
    # The same in every trial: one run per attempt, 1 + retries, in order.
    expected = list(range(1, job.retry.retries + 2))
    assert {window: [a for a, _ in runs] for window, runs in by_window.items()} == {
        job.slots.key_at(each): expected for each in fires
    }
    for runs in by_window.values():
        times = [at for _, at in runs]
        for failures, (earlier, later) in enumerate(itertools.pairwise(times), start=1):
            # Apart by at least the jittered backoff's least.
            full = min(job.retry.backoff * 2 ** (failures - 1), job.retry.backoff_max)
            assert later - earlier >= full.total_seconds() / 2
    for each in fires:
        run = JobRun.objects.get(job=job.job, window=job.slots.key_at(each))
        assert (run.status, run.failures) == (JobRun.Status.FAILED, len(expected))
