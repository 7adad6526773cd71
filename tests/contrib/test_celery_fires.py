"""A scheduled Celery task on Redis and on RabbitMQ: real schedulers, a real prefork worker.

The schedulers enqueue ``tests.fire`` (``tests.support.celeryapp``) every
second; its body appends one line per run to a file, which is what is
counted. One scheduler kills itself after its claim committed and before
Celery publishes the message: its fire's start lease lapses, another host
takes it over and enqueues it, and it runs once.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobclaims.models import JobRun
from jobclaims.testing import schedules_in_force_since
from tests.contrib.test_celery_brokers import _worker, broker  # noqa: F401  # A fixture.
from tests.scheduling.test_task_fires import fires_through_a_death_a_kill_and_two_stops, runs_in
from tests.support.celeryfleet import Fleet

pytestmark = pytest.mark.django_db(transaction=True)

JOB = "tests.fire"
#: The schedule's lease: a start lease this short has a fire whose host died
#: before its message was sent taken over within seconds.
LEASE = 2


@pytest.fixture
def worker(fleet: Fleet, broker: str, redis_url: str, tmp_path: Path) -> Iterator[Fleet]:  # noqa: F811
    yield from _worker(fleet, broker, redis_url, TESTS_FIRES_FILE=str(tmp_path / "fires"))


@pytest.mark.xdist_group("fleets")
def test_each_fire_of_a_celery_task_runs_once_though_a_host_dies_before_the_publish(
    worker: Fleet, tmp_path: Path
):
    schedules_in_force_since(datetime.timedelta(days=30))
    schedule = {"task": "tests.support.celeryapp.fire", "schedule": "* * * * * *", "lease": LEASE}
    env = {
        key: worker.env[key]
        for key in ("TESTS_CELERY_BROKER", "TESTS_CELERY_QUEUE", "TESTS_CELERY_REDIS")
    }
    env.update(
        TESTS_TASK_SCHEDULES=json.dumps({"fire": schedule}),
        TESTS_FIRES_FILE=worker.env["TESTS_FIRES_FILE"],
    )
    results = fires_through_a_death_a_kill_and_two_stops(JOB, env, tmp_path, (2, 4))

    assert "killed before enqueueing" in results[0].stdout
    assert [result.returncode for result in results[1:]] == [0, 0], results
    runs = {run.window: run for run in JobRun.objects.filter(job=JOB)}
    assert len(runs) >= 6, runs
    assert {run.status for run in runs.values()} == {JobRun.Status.SUCCEEDED}
    # The fire whose host died before the publish was taken over, as attempt 2.
    assert sorted(run.attempt for run in runs.values())[-1] >= 2
    assert runs_in(tmp_path / "fires") == dict.fromkeys(runs, 1)
    fired = sorted(datetime.datetime.fromisoformat(key) for key in runs)
    seconds = int((fired[-1] - fired[0]).total_seconds()) + 1
    assert len(runs) >= seconds - seconds // 5, (sorted(runs), [r.stdout for r in results])
