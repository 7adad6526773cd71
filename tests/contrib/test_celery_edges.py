"""Claimed Celery tasks at the edges of once per window, under a real prefork worker on Redis.

A retry's message handed out several times at once, a cancel while the body
runs, a chain with a refused link, Celery's hard time limit, and a database
that does not answer before the claim. Bodies are counted from their own
side effect: one O_APPEND line per start, stop and end
(``tests.support.celeryapp.mark``).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobclaims.models import JobRun
from tests.claims.test_concurrency import wait_until
from tests.contrib.test_celery_brokers import States, _worker
from tests.support.celeryfleet import Fleet
from tests.support.helpers import run_command

if os.environ.get("CI") != "true":  # Under CI a missing Celery fails the run.
    pytest.importorskip("celery")

pytestmark = [pytest.mark.xdist_group("fleets"), pytest.mark.django_db(transaction=True)]


#: A Redis database for each test's broker: kombu keeps one pool of
#: connections per broker address for the process, which a test closes as it ends.
_BROKER_DATABASES = itertools.count(6)


@pytest.fixture
def quick_redelivery(fleet: Fleet, redis_url: str) -> Iterator[Fleet]:
    """A worker of two pool processes on a Redis that hands an unacknowledged
    message out again after one second."""
    broker = f"{redis_url}/{next(_BROKER_DATABASES)}"
    workers = _worker(fleet, broker, redis_url, TESTS_CELERY_VISIBILITY="1")
    yield next(workers)
    next(workers, None)


def lines(path: Path) -> list[list[str]]:
    """The marks the bodies wrote: what, when, pid, attempt, retries."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_a_retry_handed_out_several_times_runs_its_body_once(quick_redelivery, tmp_path):
    from tests.support.celeryapp import retried_copies

    marks = tmp_path / "marks"
    # The retry waits 3 s in the worker, unacknowledged, and then works 2.5 s:
    # Redis hands its message out again every second of both.
    result = retried_copies.apply_async(args=[str(marks), 3.0, 2.5])
    run = JobRun.objects.filter(job="tests.retried_copies", status="succeeded")
    wait_until(run.exists, "the retry to succeed", 40)
    time.sleep(4)  # A lease and more: every copy of the retry has come and gone.
    starts = [mark for mark in lines(marks) if mark[0] == "start"]
    assert [mark[4] for mark in starts] == ["0", "1"], lines(marks)
    assert [mark[0] for mark in lines(marks)].count("end") == 1
    assert (run.get().attempt, result.state) == (1, "SUCCESS")


def test_a_cancelled_body_stops_and_its_window_waits_for_it(quick_redelivery, tmp_path):
    from jobclaims.controls.pauses import os_user
    from tests.support.celeryapp import cancellable

    marks = tmp_path / "marks"
    first = cancellable.apply_async(args=[str(marks), 20.0])
    wait_until(lambda: bool(lines(marks)), "the body to start", 20)
    _, err, status = run_command("jobclaims_cancel", "tests.cancellable")
    assert status == 0, err
    cancelled_at = time.time()
    # Calls for the window while the cancelled body may still work: each is
    # refused until it stopped and let go, then one runs the window again.
    while not any(mark[3] == "2" for mark in lines(marks)):
        cancellable.apply_async(args=[str(marks), 0.5])
        assert time.time() < cancelled_at + 20, lines(marks)
        time.sleep(0.3)
    wait_until(lambda: len(lines(marks)) == 4, "the rerun to end", 20)
    _, (stop, stopped, *_), (_, rerun, *_), (end, *_) = lines(marks)
    assert (stop, end) == ("stop", "end")
    assert float(stopped) - cancelled_at < 3, "the body was not told of its cancel in time"
    assert float(stopped) < float(rerun), "the rerun overlapped the cancelled body"
    wait_until(lambda: first.state == "REVOKED", "the cancelled call's state", 10)
    assert f"cancelled by {os_user()}" in str(first.info)
    second = JobRun.objects.filter(job="tests.cancellable", status="succeeded", attempt=2)
    wait_until(second.exists, "the rerun to be recorded", 10)


def test_a_chain_ends_at_a_refused_link_and_says_why(quick_redelivery, tmp_path):
    from celery import chain

    from tests.support.celeryapp import after, link

    marks = tmp_path / "marks"
    # Two claimed links of one window: the second is refused, so the third never runs.
    result = chain(link.s(None, str(marks)), link.s(str(marks)), after.s()).apply_async()
    wait_until(lambda: result.state == "IGNORED", f"the chain's state, not {result.state}", 20)
    assert result.info["reason"] == "succeeded"
    assert result.info["job"] == "tests.link"
    assert [mark[0] for mark in lines(marks)] == ["start"]


def test_a_hard_time_limit_is_recorded_as_a_timeout(quick_redelivery, tmp_path):
    from tests.support.celeryapp import limited

    marks = tmp_path / "marks"
    task_id = str(uuid.uuid4())
    limited.apply_async(args=[str(marks)], task_id=task_id)
    run = JobRun.objects.filter(job="tests.limited").exclude(status="running")
    wait_until(run.exists, "the run to be stopped", 20)
    assert run.get().status == "timed-out"
    assert run.get().error.startswith(
        "jobclaims.contrib.celery.CeleryTimeLimit: Celery's hard time limit of 2 s passed: "
        "the worker terminated the task's process (SIGTERM) before its body returned"
    )
    assert "SystemExit" not in run.get().error.splitlines()[0]


@pytest.fixture
def unreachable(fleet: Fleet, redis_url: str) -> Iterator[Fleet]:
    """A worker whose database is a port with no server behind it."""
    from tests.faults.test_disconnects import without_a_server

    url = without_a_server(os.environ["DATABASE_URL"])
    workers = _worker(fleet, f"{redis_url}/{next(_BROKER_DATABASES)}", redis_url, DATABASE_URL=url)
    yield next(workers)
    next(workers, None)


@pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "sqlite").startswith("sqlite"),
    reason="SQLite has no server to be unreachable",
)
def test_a_task_that_cannot_reach_its_database_fails_in_one_line(unreachable, redis_url):
    from tests.support.celeryapp import slow

    task_id = str(uuid.uuid4())
    states = States(redis_url, task_id)
    slow.apply_async(args=[0.0], task_id=task_id)
    assert states.until("FAILURE", 40) == ["FAILURE"]
    result = slow.AsyncResult(task_id)
    assert type(result.result).__name__ == "ClaimFailed"
    assert str(result.result).startswith("Could not claim tests.slow")
    assert str(result.result).endswith("so nothing ran; the next run tries again")
    # The worker logs the outcome after it has stored it.
    wait_until(lambda: "raised expected: ClaimFailed(" in unreachable.log("worker"), "its log")
    assert "Traceback" not in unreachable.log("worker")
