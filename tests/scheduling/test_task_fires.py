"""Task schedules on several "hosts": real schedulers enqueueing to real django-tasks-db workers.

Each fire's body appends one line to a file (``tests.testapp.tasks.record_fire``),
so what is counted is the runs themselves, not the claims that say they ran.
"""

from __future__ import annotations

import datetime
import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from jobclaims import add_schedule
from jobclaims.models import JobRun
from jobclaims.testing import Instance, InstanceResult, schedules_in_force_since, start
from tests.support.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

JOB = "tests.testapp.tasks.counted_fire"


@pytest.fixture(autouse=True)
def schedules_long_in_force():
    schedules_in_force_since(datetime.timedelta(days=30))


def every_second(task: str, **options: object) -> str:
    return json.dumps({"fire": {"task": task, "schedule": "* * * * * *", **options}})


def runs_in(path: Path) -> Counter[str]:
    """How many times each window's body ran, by the file the bodies append to."""
    text = path.read_text() if path.exists() else ""
    return Counter(line.split()[1] for line in text.splitlines())


def stop(hosts: list[Instance]) -> None:
    for host in hosts:
        host.stop()


def fires_through_a_death_a_kill_and_two_stops(
    job: str, env: dict[str, str], tmp_path: Path, gaps: tuple[float, float]
) -> list[InstanceResult]:
    """Four schedulers of the task schedule ``job``: the first to win a fire
    kills itself just before its enqueue (``TESTAPP_KILL_BEFORE_ENQUEUE``);
    two seconds later a second is SIGKILLed, ``gaps[0]`` seconds after that
    a third is stopped by SIGTERM, and the last ``gaps[1]`` seconds later.
    Returns how the one that died, the third and the last ended, once no
    enqueued fire is left running (the caller's workers run them)."""
    env = {**env, "TESTAPP_KILL_BEFORE_ENQUEUE": str(tmp_path / "killed")}
    hosts = start("jobclaims_scheduler", "--job", job, instances=4, env=env)
    try:
        wait_until(
            lambda: any(host.process.poll() is not None for host in hosts),
            "a host to kill itself at its first enqueue",
            20,
        )
        time.sleep(2)
        doomed = [host for host in hosts if host.process.poll() is not None]
        assert len(doomed) == 1, "one host killed itself at its first enqueue"
        hosts = doomed + [host for host in hosts if host not in doomed]
        hosts[1].process.kill()
        time.sleep(gaps[0])
        hosts[2].process.send_signal(signal.SIGTERM)
        time.sleep(gaps[1])
        hosts[3].process.send_signal(signal.SIGTERM)
        results = [host.finish(timeout=30) for host in [hosts[0], *hosts[2:]]]
        running = JobRun.objects.filter(job=job, status=JobRun.Status.RUNNING)
        try:
            wait_until(lambda: not running.exists(), "the workers to run every enqueued fire", 60)
        except AssertionError as timed_out:
            left = list(running.values("window", "owner", "attempt", "expires_at"))
            raise AssertionError(f"{timed_out}; still running: {left}") from None
    finally:
        stop(hosts)
    return results


def workers(env: dict[str, str]) -> list[Instance]:
    return start("db_worker", "--interval", "0.05", "--no-startup-delay", instances=2, env=env)


@pytest.mark.xdist_group("fleets")
def test_each_fire_of_a_task_runs_once_through_kills_stops_and_a_death_before_the_enqueue(
    tmp_path: Path,
):
    fires = tmp_path / "fires"
    env = {"TESTS_TASK_SCHEDULES": every_second(JOB, lease=5), "TESTS_FIRES_FILE": str(fires)}
    pool = workers(env)
    # The first host to win a fire dies (SIGKILL) inside its claim's
    # transaction, just before the message's INSERT; of the three others,
    # one is killed, one stopped, one stopped later.
    try:
        results = fires_through_a_death_a_kill_and_two_stops(JOB, env, tmp_path, (2.5, 3.5))
    finally:
        stop(pool)

    assert "killed before enqueueing" in results[0].stdout
    assert results[0].returncode == -signal.SIGKILL
    assert [result.returncode for result in results[1:]] == [0, 0], results
    runs = {run.window: run for run in JobRun.objects.filter(job=JOB)}
    assert len(runs) >= 6, runs
    # One transaction holds a fire's claim and its message: no host's death
    # left a claim without a message, so no fire was ever taken over.
    assert {run.status for run in runs.values()} == {JobRun.Status.SUCCEEDED}
    assert {run.attempt for run in runs.values()} == {1}
    assert all(run.started_at and run.started_at >= run.claimed_at for run in runs.values())
    # Each fire's body ran once, and only fires that were claimed ran.
    assert runs_in(fires) == dict.fromkeys(runs, 1)
    # The killed host's fire, like every other, was won by a live host.
    fired = sorted(datetime.datetime.fromisoformat(key) for key in runs)
    seconds = int((fired[-1] - fired[0]).total_seconds()) + 1
    # A host starved of CPU past a fire may miss it, with misfire "latest":
    # a few such fires on a loaded machine, not more.
    assert len(runs) >= seconds - seconds // 5, (len(runs), seconds)


@pytest.mark.xdist_group("fleets")
def test_a_failed_fire_is_retried_by_its_schedule_and_each_attempt_runs_once(tmp_path: Path):
    fires = tmp_path / "fires"
    schedules = json.dumps(
        {
            "failing": {
                "task": "tests.testapp.tasks.failing_fire",
                "schedule": "0 0 1 1 *",
                "retries": 1,
                "retry_backoff": 0,
            }
        }
    )
    env = {"TESTS_TASK_SCHEDULES": schedules, "TESTS_FIRES_FILE": str(fires)}
    job = "tests.testapp.tasks.failing_fire"
    # The fire is due at once: a retry handed to the schedulers.
    JobRun.objects.create(
        job=job,
        window="2026-01-01T00:00+00:00",
        owner="test",
        status=JobRun.Status.RETRYING,
        retry_at=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
        holds_job=None,
    )
    pool = workers(env)
    hosts = start("jobclaims_scheduler", "--job", job, instances=2, env=env)
    try:
        row = JobRun.objects.filter(job=job)
        # Failed for good: its last failure counted after its outcome was recorded.
        wait_until(lambda: row.get().failures == 2, "the retry to fail for good", 20)
    finally:
        stop(pool + hosts)

    run = row.get()
    # The queued attempt failed, was retried once by the policy, and failed again.
    assert (run.attempt, run.failures) == (3, 2), run
    assert "the report server is down" in run.error
    assert runs_in(fires) == {"2026-01-01T00:00+00:00": 2}


@pytest.mark.xdist_group("fleets")
def test_a_stored_schedule_of_a_task_runs_each_fire_once_on_three_schedulers(tmp_path: Path):
    # Fails when a stored schedule can only start commands: a task
    # scheduled from the admin enqueues nothing.
    add_schedule(
        by="alice",
        name="eu",
        task=JOB,
        task_kwargs={"tag": "eu"},
        expression="* * * * * *",
    )
    fires = tmp_path / "fires"
    env = {"TESTS_FIRES_FILE": str(fires)}
    pool = workers(env)
    hosts = start("jobclaims_scheduler", "--job", JOB, instances=3, env=env)
    try:
        time.sleep(8)
        for host in hosts:
            host.process.send_signal(signal.SIGTERM)
        results = [host.finish(timeout=30) for host in hosts]
        running = JobRun.objects.filter(job=f"{JOB}[eu]", status=JobRun.Status.RUNNING)
        wait_until(lambda: not running.exists(), "the workers to run every enqueued fire", 20)
    finally:
        stop(hosts)
        stop(pool)
    assert [result.returncode for result in results] == [0] * 3, results
    runs = {run.window: run for run in JobRun.objects.filter(job=f"{JOB}[eu]")}
    assert len(runs) >= 5, runs
    assert {run.status for run in runs.values()} == {JobRun.Status.SUCCEEDED}
    # Each fire's body ran once, with the schedule's arguments.
    assert runs_in(fires) == dict.fromkeys(runs, 1)
    assert {line.split()[3] for line in fires.read_text().splitlines()} == {"eu"}
