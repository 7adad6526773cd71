"""Claimed Celery tasks at the edges, on Redis and on RabbitMQ, with a prefork worker.

Each broker gets one worker with two pool children and runs the same story:
a pool child SIGKILLed holding a window, whose redelivery waits for the dead
run's lease, takes the window over and then uses the one ``self.retry()``
its ``max_retries`` allows, which waiting must not have spent; then a chord
and a group whose claimed members are refused. What is counted is the
bodies' own rows (``Charge``), and the states the result backend published.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import uuid
from collections.abc import Iterator

import pytest
from kombu import pools

from jobclaims.models import JobRun, JobSkip
from tests.claims.test_concurrency import wait_until
from tests.support.celeryfleet import Fleet
from tests.testapp.models import Charge

if os.environ.get("CI") != "true":  # Under CI a missing Celery fails the run.
    pytest.importorskip("celery")

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"


def _rabbitmq_answers() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=2).close()
    except OSError:
        return False
    return True


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request: pytest.FixtureRequest, redis_url: str) -> str:
    if request.param == "redis":
        return f"{redis_url}/2"
    if not _rabbitmq_answers():
        message = "no RabbitMQ on 127.0.0.1:5672: rabbitmq-server -detached"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return RABBITMQ


@pytest.fixture
def worker(fleet: Fleet, broker: str, redis_url: str) -> Iterator[Fleet]:
    """One prefork worker with two pool children, on a queue of this test's own."""
    yield from _worker(fleet, broker, redis_url)


def _worker(fleet: Fleet, broker: str, redis_url: str, **env: str) -> Iterator[Fleet]:
    from tests.support.celeryapp import app

    queue = f"jobclaims-{uuid.uuid4().hex}"
    _forget_broker(app)
    app.conf.update(broker_url=broker, result_backend=f"{redis_url}/1", task_default_queue=queue)
    fleet.env.update(TESTS_CELERY_BROKER=broker, TESTS_CELERY_QUEUE=queue, **env)
    fleet.start("worker", *_worker_options(queue))
    wait_until(lambda: "ready." in fleet.log("worker"), "the worker to start", 90)
    yield fleet
    _forget_broker(app)
    app.conf.update(task_default_queue="celery")


def _worker_options(queue: str) -> list[str]:
    """A prefork worker with two pool children, consuming ``queue``."""
    return [
        "worker",
        "--concurrency=2",
        "--pool=prefork",
        # A node name of its own: two workers named alike (two suites side
        # by side) both declare RabbitMQ's exclusive celery@host.celery.pidbox
        # queue, and the second dies with RESOURCE_LOCKED before it is ready.
        f"--hostname={queue}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--loglevel=INFO",
    ]


def _forget_broker(app: object) -> None:
    """Drop the connections and queues the app built for the last broker it used."""
    # Not app.close(): it would also take the app off the list of apps that
    # later @shared_task functions register with. The pools leave kombu's
    # registry of pools by connection too: closed and left there, they broke
    # the next producer any later test of this process asked for (the eager
    # call's: "Acquire on closed pool").
    pools.reset()
    app._pool = None  # type: ignore[attr-defined]
    del app.amqp  # type: ignore[attr-defined]  # Rebuilt from the settings when next used.


class States:
    """Every state the Redis result backend publishes for one task id."""

    def __init__(self, redis_url: str, task_id: str):
        import redis

        self.pubsub = redis.Redis.from_url(f"{redis_url}/1").pubsub()
        self.pubsub.subscribe(f"celery-task-meta-{task_id}")
        self.seen: list[str] = []

    def until(self, final: str, timeout: float) -> list[str]:
        def arrived() -> bool:
            message = self.pubsub.get_message(timeout=0.2)
            if message and message["type"] == "message":
                self.seen.append(json.loads(message["data"])["status"])
            return final in self.seen

        wait_until(arrived, f"the state {final}, after {self.seen}", timeout)
        self.pubsub.close()
        return self.seen


@pytest.mark.xdist_group("fleets")
@pytest.mark.django_db(transaction=True)
def test_a_killed_holders_window_is_taken_over_and_retried_once_and_refused_canvas_members_complete(
    worker: Fleet,
    redis_url: str,
):
    from celery import chord, group

    from tests.support.celeryapp import gather, killed_then_retried, part

    task_id = str(uuid.uuid4())
    states = States(redis_url, task_id)
    killed_then_retried.apply_async(task_id=task_id)
    first = Charge.objects.filter(job="tests.killed_then_retried", step=0)
    wait_until(first.exists, "the task to start", 20)
    os.kill(first.get().pid, signal.SIGKILL)

    # The redelivery waits quietly; its own retry is the one RETRY; no IGNORED.
    assert states.until("SUCCESS", 30) == ["RETRY", "SUCCESS"]
    finished = Charge.objects.filter(job="tests.killed_then_retried", step=1)
    assert list(finished.values_list("attempt", flat=True)) == [2]
    run = JobRun.objects.get(job="tests.killed_then_retried")
    assert (run.status, run.attempt) == ("succeeded", 2)

    # Three members for one window: one runs, two are refused, the callback runs once.
    results = chord([part.s(1), part.s(2), part.s(3)])(gather.s()).get(timeout=20)
    refusals = [result for result in results if isinstance(result, dict)]
    assert [refusal["job"] for refusal in refusals] == ["tests.part", "tests.part"]
    assert Charge.objects.filter(job="tests.part").count() == 1
    gathered = Charge.objects.get(job="tests.gather")
    assert (gathered.attempt, gathered.step) == (3, 2)

    # A group's refused members are IGNORED, each with its reason.
    members = group([part.s(4), part.s(5)]).apply_async()
    wait_until(
        lambda: all(member.state == "IGNORED" for member in members.results),
        "the group's members to be refused",
        15,
    )
    assert {member.info["reason"] for member in members.results} == {"succeeded"}
    assert Charge.objects.filter(job="tests.part").count() == 1


@pytest.mark.xdist_group("fleets")
@pytest.mark.django_db(transaction=True)
def test_a_redelivery_after_the_visibility_timeout_leaves_the_running_calls_state_alone(
    fleet: Fleet, redis_url: str
):
    from tests.support.celeryapp import outlasted

    workers = _worker(fleet, f"{redis_url}/3", redis_url, TESTS_CELERY_VISIBILITY="1")
    next(workers)
    try:
        task_id = str(uuid.uuid4())
        states = States(redis_url, task_id)
        outlasted.apply_async(task_id=task_id)
        # Redis hands the message out again a second in: that copy is refused,
        # comes back for the lease and is refused again, quietly each time.
        assert states.until("SUCCESS", 30) == ["SUCCESS"]
    finally:
        next(workers, None)
    assert Charge.objects.filter(job="tests.outlasted", step=1).count() == 1
    assert sum(JobSkip.objects.filter(job="tests.outlasted").values_list("count", flat=True)) >= 2


@pytest.mark.xdist_group("fleets")
@pytest.mark.django_db(transaction=True)
def test_a_worker_or_beat_with_claimed_under_a_task_refuses_to_start_and_consumes_nothing(
    fleet: Fleet, broker: str, redis_url: str
):
    from tests.support.celeryapp import app

    queue = f"jobclaims-{uuid.uuid4().hex}"
    _forget_broker(app)
    app.conf.update(broker_url=broker, result_backend=f"{redis_url}/1", task_default_queue=queue)
    try:
        app.send_task("tests.claimed_under")
        fleet.env.update(
            TESTS_CELERY_BROKER=broker,
            TESTS_CELERY_QUEUE=queue,
            TESTS_CELERY_INCLUDE="tests.support.misordered.tasks",
        )
        fleet.start("worker", *_worker_options(queue))
        fleet.start("beat", "beat", f"--schedule={fleet.logs / 'schedule'}", "--loglevel=INFO")
        for name in ("worker", "beat"):
            assert fleet.processes[name].wait(timeout=30) == 1
            assert (
                "Refusing to start: tests.claimed_under, tests.claimed_under_a_wrapper: "
                "@claimed cannot be the body of a "
                "Celery task: a refused call would look like a success. Drop @claimed and make "
                "it a claimed task: @shared_task(base=jobclaims.contrib.celery.ClaimedTask, "
                "claim_window=...)"
            ) in fleet.log(name)
        with app.connection_for_read() as connection:
            waiting = connection.default_channel.queue_declare(queue, passive=True).message_count
    finally:
        _forget_broker(app)
        app.conf.update(task_default_queue="celery")
    assert waiting == 1, "the worker consumed the task's message"
    assert "ready." not in fleet.log("worker")
    assert not JobRun.objects.exists()
    assert not Charge.objects.exists()
