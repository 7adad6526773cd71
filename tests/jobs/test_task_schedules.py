"""Task schedules: how they are declared, named, checked and enqueued, in one process."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext

from jobclaims import scheduled
from jobclaims.checks import check_beat_and_jobclaims, check_scheduled_tasks, check_schedules
from jobclaims.jobs import discovery, task_schedules
from jobclaims.jobs.schedules import JobSchedule
from jobclaims.jobs.task_schedules import TaskTarget
from jobclaims.models import JobRun
from jobclaims.running.queued import FIRE_KWARG, QueuedFire
from jobclaims.scheduling.scheduler import Scheduler
from jobclaims.testing import schedules_in_force_since
from jobclaims.time.clock import database_now
from tests.testapp import tasks

MINUTE = datetime.timedelta(minutes=1)
#: A statement that claims: an INSERT (MariaDB's INSERT IGNORE) of claim rows.
CLAIM_INSERT = re.compile(r"\bINSERT\s+(IGNORE\s+)?INTO\s+jobclaims_jobrun\b")


@pytest.fixture(autouse=True)
def declared_here() -> Iterator[None]:
    """What a test declares with @scheduled is forgotten after it."""
    before = list(task_schedules._declared)
    yield
    task_schedules._declared[:] = before


def in_settings(settings, **entries: dict[str, object]) -> None:
    settings.JOBCLAIMS = {"TASK_SCHEDULES": entries}


def test_the_decorator_returns_the_task_and_schedules_it_under_its_claimed_job():
    assert scheduled("0 3 * * *", kwargs={"tag": "night"}, retries=2)(tasks.counted_fire) is (
        tasks.counted_fire
    )
    (job,) = discovery.schedules_of("tests.testapp.tasks.counted_fire")
    assert job.job == "tests.testapp.tasks.counted_fire"
    assert (job.cron.expression, job.retry.retries, job.allow_overlap) == ("0 3 * * *", 2, True)
    assert isinstance(job.task, TaskTarget)
    assert dict(job.task.kwargs) == {"tag": "night"}
    assert "tests.testapp.tasks.counted_fire" in discovery.jobs_in_code()


def test_several_schedules_of_a_task_are_named_by_their_arguments(settings):
    in_settings(
        settings,
        eu={"task": "tests.testapp.tasks.counted_fire", "schedule": "0 * * * *", "args": ["eu"]},
        us={"task": "tests.testapp.tasks.counted_fire", "schedule": "30 * * * *"},
    )
    jobs, problems = discovery.usable_jobs()
    names = sorted(job.job for job in jobs if job.task is not None)
    assert problems == {}
    assert names == [
        "tests.testapp.tasks.counted_fire[eu]",
        "tests.testapp.tasks.counted_fire[us]",
    ]
    by_name = {job.name: job for job in jobs if job.task is not None}
    eu = by_name["eu"].task
    assert isinstance(eu, TaskTarget)
    assert eu.args == ("eu",)


@pytest.mark.django_db(transaction=True)
def test_schedules_of_a_task_apart_only_by_their_keyword_arguments_are_each_scheduled(settings):
    # Failed when only the expression, zone and args told schedules apart:
    # the task was left out as one schedule declared twice.
    task = "tests.testapp.tasks.counted_fire"
    in_settings(
        settings,
        eu={"task": task, "schedule": "0 * * * *", "kwargs": {"tag": ["eu"]}},
        us={"task": task, "schedule": "0 * * * *", "kwargs": {"tag": ["us"]}},
    )
    jobs, problems = discovery.usable_jobs()
    assert problems == {}
    both = [job for job in jobs if job.task is not None]
    assert {job.name: dict(job.task.kwargs) for job in both} == {  # type: ignore[union-attr]
        "eu": {"tag": ["eu"]},
        "us": {"tag": ["us"]},
    }
    # Each fire of each is enqueued: their fires are not one series'.
    schedules_in_force_since(datetime.timedelta(days=1))
    fire = both[0].cron.latest_fire(database_now())
    assert fire is not None
    Scheduler(both, max_jobs=1, say=print).start_due(fire + datetime.timedelta(seconds=1))
    from django_tasks_db.models import DBTaskResult

    sent = sorted(
        str(each["kwargs"]["tag"])
        for each in DBTaskResult.objects.values_list("args_kwargs", flat=True)
    )
    assert sent == ["['eu']", "['us']"]


def test_a_schedule_that_cannot_work_is_named_with_the_fix(settings):
    in_settings(
        settings,
        bad={"task": "tests.testapp.tasks.counted_fire", "schedule": "0 3 * * *", "misfire": "x"},
    )
    jobs, problems = discovery.usable_jobs()
    assert all(job.task is None for job in jobs)
    (problem,) = problems.values()
    assert "TASK_SCHEDULES['bad']" in problem
    assert "misfire 'x' is not one of" in problem
    (warning,) = [each for each in check_schedules() if "TASK_SCHEDULES" in each.msg]
    assert warning.id == "jobclaims.W005"


def test_a_task_that_cannot_take_its_fire_over_is_a_check_error(settings):
    in_settings(
        settings, raw={"task": "tests.testapp.tasks.unclaimed_fire", "schedule": "* * * * *"}
    )
    (error,) = check_scheduled_tasks()
    assert error.id == "jobclaims.E009"
    assert "does not run a @claimed function" in error.msg
    assert "put @claimed() under @task" in error.msg
    assert discovery.usable_jobs()[0] == [job for job in discovery.usable_jobs()[0] if not job.task]


def test_a_bad_setting_is_refused_by_check_e003(settings):
    settings.JOBCLAIMS = {"TASK_SCHEDULES": {"nightly": {"schedule": "0 3 * * *"}}}
    with pytest.raises(Exception, match="must name its task by dotted path"):
        call_command("check", "--tag", "jobclaims")


def test_a_task_that_beat_schedules_too_is_a_warning(settings):
    in_settings(
        settings, fire={"task": "tests.testapp.tasks.counted_fire", "schedule": "* * * * *"}
    )
    settings.CELERY_BEAT_SCHEDULE = {
        "fire": {"task": "tests.testapp.tasks.counted_fire", "schedule": 60.0}
    }
    (warning,) = check_beat_and_jobclaims()
    assert warning.id == "jobclaims.W006"


@pytest.mark.django_db(transaction=True)
def test_the_claim_and_the_message_commit_together_and_one_copy_adopts(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTS_FIRES_FILE", str(tmp_path / "fires"))
    scheduled("0 3 * * *", lease=MINUTE)(tasks.counted_fire)
    (job,) = discovery.schedules_of("tests.testapp.tasks.counted_fire")
    key = "2026-12-01T03:00+00:00"

    def claim(lease: datetime.timedelta):
        return JobRun.objects.try_claim(
            job.job, key, lease=lease, schedule=job.slots.recorded_schedule
        )

    assert job.task is not None
    run = job.task.fire(job, claim, start_lease=MINUTE, jittered=False)
    assert isinstance(run, JobRun)
    assert run.started_at is None
    from django_tasks_db.models import DBTaskResult

    (message,) = DBTaskResult.objects.all()
    fire = message.args_kwargs["kwargs"][FIRE_KWARG]
    assert QueuedFire.from_json(fire).token == str(run.token)
    # The worker's first copy adopts the claim and runs; a second steps aside.
    assert tasks.counted_fire.call(**message.args_kwargs["kwargs"]) == key
    assert tasks.counted_fire.call(**json.loads(json.dumps(message.args_kwargs["kwargs"]))) is None
    run.refresh_from_db()
    assert run.status == JobRun.Status.SUCCEEDED
    assert run.started_at is not None
    assert (tmp_path / "fires").read_text().count(key) == 1


def many_schedules(settings, count: int) -> list[JobSchedule]:
    """``count`` schedules of one task due at the same instants, in force."""
    entries: dict[str, dict[str, object]] = {
        f"n{number}": {
            "task": "tests.testapp.tasks.counted_fire",
            "schedule": "0 * * * *",
            "kwargs": {"tag": f"n{number}"},
        }
        for number in range(count)
    }
    in_settings(settings, **entries)
    jobs, problems = discovery.usable_jobs()
    assert problems == {}
    schedules_in_force_since(datetime.timedelta(days=1))
    return [job for job in jobs if job.task is not None]


def messages() -> list[str]:
    from django_tasks_db.models import DBTaskResult

    return sorted(
        each["kwargs"]["tag"] for each in DBTaskResult.objects.values_list("args_kwargs", flat=True)
    )


@pytest.mark.django_db(transaction=True)
def test_a_looks_task_fires_are_claimed_in_one_insert_each_with_its_message(settings):
    jobs = many_schedules(settings, 30)
    fire = jobs[0].cron.latest_fire(database_now())
    assert fire is not None
    with CaptureQueriesContext(connection) as queries:
        Scheduler(jobs, max_jobs=1, say=print).start_due(fire + datetime.timedelta(seconds=1))
    claims = [each for each in queries if CLAIM_INSERT.search(each["sql"])]
    assert len(claims) == 1
    assert messages() == sorted(f"n{number}" for number in range(30))
    assert JobRun.objects.filter(status=JobRun.Status.RUNNING).count() == 30


@pytest.mark.django_db(transaction=True)
def test_a_database_error_among_a_batchs_messages_commits_none_of_its_claims(settings, monkeypatch):
    # As a host that dies between its claims and their messages: neither stays.
    jobs = many_schedules(settings, 10)
    fire = jobs[0].cron.latest_fire(database_now())
    assert fire is not None
    real = TaskTarget.enqueue
    sent = []

    def refused_fifth(self: TaskTarget, *args: object, **kwargs: object) -> None:
        sent.append(True)
        if len(sent) == 5:
            raise IntegrityError("the queue's table refused the message")
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(TaskTarget, "enqueue", refused_fifth)
    look = fire + datetime.timedelta(seconds=1)
    with pytest.raises(IntegrityError):
        Scheduler(jobs, max_jobs=1, say=print).start_due(look)
    assert (JobRun.objects.count(), messages()) == (0, [])
    monkeypatch.setattr(TaskTarget, "enqueue", real)
    Scheduler(jobs, max_jobs=1, say=print).start_due(look)
    assert messages() == sorted(f"n{number}" for number in range(10))
