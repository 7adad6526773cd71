"""Claimed Celery tasks under real beats and workers, on a Redis of the test's own.

Two ``celery beat`` processes send ``tests.tick`` every second each, as two
pods of a deploy overlap would, to two workers with two pool children each;
every 2-second window must run once, and none be missed. Meanwhile a pool
child is SIGKILLed in the middle of an ``acks_late`` task: Celery redelivers
it at once, it waits for the dead run's lease, which ends after the window
does, and the window still ends succeeded, once. A task that calls
``self.retry()`` keeps its claim, and a refused task is IGNORED in the
result backend, not a SUCCESS.
"""

from __future__ import annotations

import datetime
import itertools
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest
from django.db import connection
from django.db.models import Sum

from jobclaims.jobs.claiming import claimed, misordered_tasks
from jobclaims.models import JobRun, JobSkip
from jobclaims.time.windows import resolve
from tests.claims.test_concurrency import wait_until
from tests.support.celeryfleet import Fleet
from tests.testapp.models import Charge

if TYPE_CHECKING:
    from celery import Celery

if os.environ.get("CI") != "true":  # Under CI a missing Celery fails the run.
    pytest.importorskip("celery")

RUN_FOR = 30  # Seconds of two beats: 15 windows of tests.tick.


@pytest.mark.xdist_group("fleets")
@pytest.mark.django_db(transaction=True)
def test_two_beats_and_two_workers_run_every_window_once_through_a_worker_loss(
    fleet: Fleet, redis_url: str, capsys
):
    os.environ["TESTS_CELERY_REDIS"] = redis_url
    from jobclaims.contrib.celery import WINDOW_HEADER
    from tests.support.celeryapp import OUTLIVED_WINDOW, TICK_WINDOW, app, outlived, retried

    app.conf.update(broker_url=f"{redis_url}/0", result_backend=f"{redis_url}/1")
    for number in (1, 2):
        fleet.start(
            f"worker{number}",
            "worker",
            "--concurrency=2",
            "--pool=prefork",
            f"--hostname=worker{number}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
        )
    for number in (1, 2):
        log = f"worker{number}"
        wait_until(lambda: "ready." in fleet.log(log), f"{log} to start", 30)  # noqa: B023
    for number in (1, 2):
        schedule = fleet.logs / f"beat{number}-schedule"
        fleet.start(f"beat{number}", "beat", f"--schedule={schedule}", "--loglevel=INFO")
    for number in (1, 2):
        log = f"beat{number}"
        wait_until(lambda: "Sending due task" in fleet.log(log), f"{log} to send", 30)  # noqa: B023
    started = time.monotonic()  # Beats start slowly on a loaded machine: count from here.

    # A pool child killed mid-task: the redelivery waits for the dead run's
    # lease, which outlives the window, and then finishes that window.
    killed = outlived.apply_async(args=[5.0])
    first_delivery = Charge.objects.filter(job="tests.outlived", step=0)
    wait_until(first_delivery.exists, "the task to start", 20)
    started_run = first_delivery.get()
    os.kill(started_run.pid, signal.SIGKILL)
    assert killed.get(timeout=25) == started_run.window

    # Celery's own retry keeps the claim: attempt 1, no failure recorded.
    assert retried.apply_async().get(timeout=15) == 1

    # A refusal is IGNORED in the result backend, and says why.
    refused = outlived.apply_async(args=[0.0], headers={WINDOW_HEADER: started_run.window})
    wait_until(lambda: refused.state == "IGNORED", "the refused task's state", 15)
    assert refused.info["reason"] == "succeeded"
    assert refused.info["job"] == "tests.outlived"

    time.sleep(max(0.0, RUN_FOR - (time.monotonic() - started)))
    fleet.stop("beat1", "beat2")
    time.sleep(TICK_WINDOW.total_seconds() + 1)  # Let the last window's tasks end.
    fleet.stop("worker1", "worker2")

    outlived_run = JobRun.objects.get(job="tests.outlived")
    assert (outlived_run.status, outlived_run.attempt) == ("succeeded", 2)
    window_end = resolve(OUTLIVED_WINDOW).start_of(outlived_run.window) + OUTLIVED_WINDOW
    assert outlived_run.claimed_at >= window_end, "the takeover did not outlive the window"
    finished = Charge.objects.filter(job="tests.outlived", step=1)
    assert [charge.attempt for charge in finished] == [2]

    retried_run = JobRun.objects.get(job="tests.retried")
    assert (retried_run.status, retried_run.attempt, retried_run.error) == ("succeeded", 1, "")

    ticks = JobRun.objects.filter(job="tests.tick")
    assert not ticks.exclude(status="succeeded").exists(), list(ticks.values())
    window = resolve(TICK_WINDOW)
    starts = sorted(window.start_of(run.window) for run in ticks)
    # The first and last windows may have been cut by the beats' start and stop.
    inner = starts[1:-1]
    assert len(inner) >= RUN_FOR / TICK_WINDOW.total_seconds() - 4, starts
    gaps = [later - earlier for earlier, later in itertools.pairwise(inner)]
    assert set(gaps) == {TICK_WINDOW}, f"a window was missed: {starts}"
    runs_per_window = Counter(Charge.objects.filter(job="tests.tick").values_list("window"))
    assert set(runs_per_window.values()) == {1}, runs_per_window

    skips = JobSkip.objects.filter(job="tests.tick")
    rows, counted = skips.count(), sum(skips.values_list("count", flat=True))
    per_day = 86400 / TICK_WINDOW.total_seconds() / len(starts)
    reasons = dict(skips.values_list("reason").annotate(n=Sum("count")).values_list("reason", "n"))
    with capsys.disabled():
        print(
            f"\n[{connection.vendor}] tests.tick: {len(starts)} windows run once each; "
            f"{counted} skips in {rows} rows ({rows / len(starts):.2f} rows per window, "
            f"{rows * per_day:,.0f} a day); reasons {reasons}"
        )


def test_claimed_above_a_celery_task_is_refused_naming_the_fix():
    from celery import current_app, shared_task

    # The current app may be one that no longer learns of new shared tasks,
    # as an app a task ran on is left once it is closed: the refusal must not
    # ask it for the task.
    previous = current_app._get_current_object()
    with own_app() as app:
        app.finalize()
    app.set_current()
    try:

        @shared_task(name="tests.support.misordered")
        def misordered() -> None: ...

        with pytest.raises(TypeError, match=r"base=jobclaims\.contrib\.celery\.ClaimedTask"):
            claimed(window="hourly")(misordered)
    finally:
        previous.set_current()


def test_a_claimed_task_with_a_bad_window_is_refused_as_it_is_defined():
    from jobclaims.contrib.celery import ClaimedTask

    def bad_window() -> None: ...

    # A task is created when first used, or at once by a ready app.
    with own_app() as app:
        task = app.task(
            name="tests.bad_window", base=ClaimedTask, claim_window="hourl", shared=False
        )
        with pytest.raises(ValueError, match="unknown window 'hourl'"):
            task(bad_window).run  # noqa: B018


@contextmanager
def own_app() -> Iterator[Celery]:
    """An app of the test's own, for tasks made with ``shared=False``: a shared
    task stays in Celery's list, to be built by every app that is finalized
    later in this process (check jobclaims.E007's among them)."""
    from celery import Celery

    with Celery("tests.own", set_as_current=False) as app:
        yield app


@pytest.mark.django_db(transaction=True)
def test_a_refused_call_run_eagerly_or_by_apply_is_ignored_not_a_success():
    from celery import states

    from jobclaims.contrib.celery import ClaimRefused
    from tests.support.celeryapp import app, slow

    window = slow.apply(args=[0.0]).get()
    refused = slow.apply(args=[0.0])
    app.conf.task_always_eager = True
    try:
        eager = slow.delay(0.0)
    finally:
        app.conf.task_always_eager = False
    for result in (refused, eager):
        assert result.state == states.IGNORED
        assert isinstance(result.result, ClaimRefused)
        assert result.result.meta == {
            "job": "tests.slow",
            "window": window,
            "reason": "succeeded",
            "held_until": None,
        }
    assert slow(0.0) is None  # Called as a function: None, as from @claimed.
    assert Charge.objects.filter(step=1).count() == 1


@pytest.mark.django_db(transaction=True)
def test_claimed_under_a_celery_task_is_refused_at_its_call_and_nothing_is_written():
    def body() -> None:
        Charge.objects.create(job="tests.claimed_under", window="", pid=os.getpid(), attempt=1)

    with own_app() as app:
        claimed_under = app.task(name="tests.claimed_under", shared=False)(
            claimed(window="hourly")(body)
        )
        with pytest.raises(TypeError, match=r"base=jobclaims\.contrib\.celery\.ClaimedTask"):
            claimed_under.apply(throw=True)
    assert not JobRun.objects.exists()
    assert not Charge.objects.exists()


def test_a_misspelt_claim_option_is_refused_naming_the_right_one():
    from jobclaims.contrib.celery import ClaimedTask

    def misspelt() -> None: ...

    with own_app() as app:
        task = app.task(name="tests.misspelt", base=ClaimedTask, claim_windw="hourly", shared=False)
        with pytest.raises(
            ValueError,
            match=r"claim_windw is not a ClaimedTask option: did you mean claim_window\?",
        ):
            task(misspelt).run  # noqa: B018


@pytest.mark.django_db(transaction=True)
def test_a_task_id_too_long_for_the_owner_column_is_recorded_by_its_hash():
    from tests.support.celeryapp import slow

    task_id = "x" * 240
    assert slow.apply(args=[0.0], task_id=task_id).get() == JobRun.objects.get().window
    owner = JobRun.objects.get().owner
    assert task_id not in owner
    assert " task sha256:" in owner


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"claim_allow_overlap": "no"}, "claim_allow_overlap must be True or False, not 'no'"),
        (
            {"claim_lease": datetime.timedelta(microseconds=1)},
            "claim_lease is 0:00:00.000001, shorter than the 0.1 s a lease must last",
        ),
    ],
)
def test_a_claim_option_a_task_could_not_run_with_is_refused_naming_the_task(options, refused):
    from jobclaims.contrib.celery import ClaimedTask

    def unrunnable() -> None: ...

    with own_app() as app:
        task = app.task(name="tests.unrunnable", base=ClaimedTask, shared=False, **options)
        with pytest.raises(ValueError, match=f"^task tests.unrunnable: {re.escape(refused)}"):
            task(unrunnable).run  # noqa: B018


def test_claim_options_given_through_task_annotations_are_refused_too():
    from jobclaims.contrib.celery import ClaimedTask

    def annotated() -> None: ...

    with own_app() as app:
        app.conf.task_annotations = {"tests.annotated": {"claim_lease": datetime.timedelta(0)}}
        task = app.task(name="tests.annotated", base=ClaimedTask, shared=False)
        refused = r"^task tests\.annotated: claim_lease must be a positive"
        with pytest.raises(ValueError, match=refused):
            task(annotated).run  # noqa: B018


def test_claimed_under_a_decorator_without_wraps_is_refused_at_its_call():
    def logged(function: Callable[..., object]) -> Callable[..., object]:
        def inner(*args: object, **kwargs: object) -> object:
            return function(*args, **kwargs)

        return inner

    def body() -> None: ...

    with own_app() as app:
        misordered = logged(claimed(window="hourly")(body))
        wrapped = app.task(name="tests.wrapped", shared=False)(misordered)
        assert misordered_tasks(app) == ["tests.wrapped"]
        with pytest.raises(TypeError, match=r"base=jobclaims\.contrib\.celery\.ClaimedTask"):
            wrapped.apply(throw=True)
