"""A fire its scheduler will retry is no failure to health, at any instant:
its job records the failure, then the scheduler settles it retrying, and
--check, the health page and the metrics read between the two."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from jobclaims.jobs.discovery import scheduled_jobs
from jobclaims.jobs.schedules import JobSchedule
from jobclaims.models import JobRun, SchedulerSeen
from jobclaims.monitoring.health import job_health
from jobclaims.scheduling.seen import fingerprint, schedules_run
from jobclaims.testing import start
from jobclaims.time.clock import database_now
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("deployed_now")]

MINUTE = datetime.timedelta(minutes=1)
#: tests/testapp's job that fails every attempt: 3 retries, a second apart.
JOB = "always_fails"


def the_job(name: str) -> JobSchedule:
    (job,) = [job for job in scheduled_jobs() if job.job == name]
    return job


def scheduler_seen(last_seen: datetime.datetime) -> SchedulerSeen:
    schedules = schedules_run(scheduled_jobs())
    return SchedulerSeen.objects.create(
        host="web-1",
        pid=4242,
        schedules=schedules,
        fingerprint=fingerprint(schedules),
        started_at=last_seen - MINUTE,
        last_seen_at=last_seen,
    )


def a_failed_fire(**fields: object) -> JobRun:
    """A fire of the job, as its process recorded it failed just now, before
    the scheduler that claimed it (web-1:4242) settles it."""
    now = database_now()
    columns: dict[str, object] = {
        "job": JOB,
        "window": "2026-11-29T10:00:00+00:00",
        "schedule": the_job(JOB).slots.recorded_schedule,
        "owner": "web-1:4242:0c0ffee0",
        "status": JobRun.Status.FAILED,
        "error": "RuntimeError: the ledger is closed",
        "claimed_at": now - datetime.timedelta(seconds=2),
        "expires_at": now + MINUTE,
        "finished_at": now,
    }
    return JobRun.objects.create(**{**columns, **fields})


def failed() -> JobRun | None:
    [health] = job_health(JOB)
    return health.failed


def test_a_failure_its_live_scheduler_has_yet_to_settle_is_no_failure_yet():
    scheduler_seen(database_now())
    run = a_failed_fire()
    assert failed() is None
    JobRun.objects.filter(pk=run.pk).update(status=JobRun.Status.TIMED_OUT)
    assert failed() is None
    # Settled for good: the scheduler counted the last of the job's 3 retries.
    JobRun.objects.filter(pk=run.pk).update(failures=4)
    assert failed() == run
    assert job_health(JOB)[0].failures_in_a_row == 1


def test_a_failure_is_a_failure_once_its_scheduler_cannot_settle_it():
    seen = scheduler_seen(database_now())
    run = a_failed_fire()
    # Its scheduler is no longer live: it died before it settled the fire.
    SchedulerSeen.objects.filter(pk=seen.pk).update(last_seen_at=database_now() - 10 * MINUTE)
    assert failed() == run
    SchedulerSeen.objects.filter(pk=seen.pk).update(last_seen_at=database_now())
    assert failed() is None
    # Recorded longer ago than a scheduler takes to settle, however long it lives.
    JobRun.objects.filter(pk=run.pk).update(finished_at=database_now() - 10 * MINUTE)
    assert failed() == run


def test_a_failure_no_scheduler_started_is_a_failure_at_once():
    scheduler_seen(database_now())
    # Run by cron or by hand: nothing settles it, whatever schedulers live.
    run = a_failed_fire(owner="cron-host:99:0c0ffee0")
    assert failed() == run


def test_a_scheduled_retry_is_never_a_failure_until_its_retries_are_spent(tmp_path: Path):
    """A real scheduler runs the job's four attempts; health is read without
    pause meanwhile, and every failed run it reports is the settled last one."""
    attempts = tmp_path / "attempts"
    [host] = start("jobclaims_scheduler", "--job", JOB, env={"ATTEMPTS_FILE": str(attempts)})
    reported = []
    try:

        def settled_for_good() -> bool:
            if (run := failed()) is not None:
                reported.append(run)
            return JobRun.objects.filter(job=JOB, status=JobRun.Status.FAILED, failures=4).exists()

        # The job fires every 15 s; its attempts are a second or so apart.
        wait_until(settled_for_good, "a fire to fail four times", timeout=60)
    finally:
        host.stop()
    assert len(attempts.read_text().splitlines()) >= 4
    assert all(run.failures == 4 for run in reported), [
        (run.window, run.status, run.failures) for run in reported
    ]
    assert failed() is not None
