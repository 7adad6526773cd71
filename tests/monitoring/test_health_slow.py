"""Slow runs: a run going on far longer than its job's latest successes
took is a problem, which ``jobclaims_status --check``, the health page and
the metrics all report."""

from __future__ import annotations

import datetime

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from jobclaims.models import JobRun
from jobclaims.monitoring.health import read_health
from jobclaims.time.clock import database_now
from tests.monitoring.test_health_schedules import verdicts
from tests.support.helpers import run_command

# The health page's check reads in a thread of its own: committed rows only.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("deployed_now")]

SECOND = datetime.timedelta(seconds=1)
MINUTE = datetime.timedelta(minutes=1)
HOUR = datetime.timedelta(hours=1)
JOB = "export_ledger"


def succeeded(job: str, n: int, took: datetime.timedelta) -> None:
    """The ``n``th run of ``job``, started by hand hours ago, which took ``took``."""
    claimed = database_now() - (10 + n) * HOUR
    JobRun.objects.create(
        job=job,
        window=f"run-{n}",
        owner="web-1:4242:0c0ffee0",
        status=JobRun.Status.SUCCEEDED,
        claimed_at=claimed,
        expires_at=claimed + HOUR,
        finished_at=claimed + took,
    )


def running_for(job: str, span: datetime.timedelta) -> JobRun:
    """A run of ``job`` that started ``span`` ago and whose holder still renews its lease."""
    now = database_now()
    return JobRun.objects.create(
        job=job,
        window="run-now",
        owner="web-2:777:0badcafe",
        status=JobRun.Status.RUNNING,
        claimed_at=now - span,
        expires_at=now + 10 * MINUTE,
    )


def test_a_run_three_times_longer_than_its_usual_duration_is_slow(client):
    for n in range(3):
        succeeded(JOB, n, 2 * MINUTE)
    running_for(JOB, 7 * MINUTE)
    assert verdicts(client) == {JOB: {"slow"}}
    out, _err, status = run_command("jobclaims_status", "--check")
    assert status  # run_command() reports a CommandError as 1; the command exits 2
    assert (
        f"{JOB}: slow: the run-now run of web-2:777:0badcafe has run for 7 min, "
        "over 3 times its usual 2 min"
    ) in out


def test_a_run_within_three_times_its_usual_duration_is_not_slow(client):
    for n in range(3):
        succeeded(JOB, n, 2 * MINUTE)
    running_for(JOB, 5 * MINUTE)
    assert verdicts(client) == {}


def test_a_run_of_a_short_job_is_not_slow_within_a_minute(client):
    for n in range(3):
        succeeded(JOB, n, 5 * SECOND)
    running_for(JOB, 50 * SECOND)
    assert verdicts(client) == {}
    JobRun.objects.filter(window="run-now").update(claimed_at=database_now() - 70 * SECOND)
    assert verdicts(client) == {JOB: {"slow"}}


def test_a_job_with_fewer_than_three_successes_has_no_usual_duration(client):
    for n in range(2):
        succeeded(JOB, n, 5 * SECOND)
    running_for(JOB, HOUR)
    assert verdicts(client) == {}


def test_the_usual_duration_is_the_median_so_one_run_that_hung_does_not_count(client):
    succeeded(JOB, 0, 3 * HOUR)
    for n in range(1, 5):
        succeeded(JOB, n, 2 * MINUTE)
    running_for(JOB, 30 * MINUTE)
    assert verdicts(client) == {JOB: {"slow"}}


def test_only_the_latest_twenty_successes_make_the_usual_duration(client):
    # Long ago the job took an hour; its latest twenty runs took a minute.
    for n in range(20):
        succeeded(JOB, n, MINUTE)
    for n in range(20, 40):
        succeeded(JOB, n, HOUR)
    running_for(JOB, 10 * MINUTE)
    assert verdicts(client) == {JOB: {"slow"}}


def queries_of_health() -> int:
    with CaptureQueriesContext(connections["default"]) as captured:
        read_health()
    return len(captured.captured_queries)


def test_slow_runs_are_found_in_as_many_queries_for_ten_jobs_as_for_one():
    def make(job: str) -> None:
        for n in range(3):
            succeeded(job, n, MINUTE)
        running_for(job, HOUR)

    make("slow_0")
    few = queries_of_health()
    for n in range(1, 10):
        make(f"slow_{n}")
    assert queries_of_health() == few
    assert sorted(job.job for job in read_health().jobs if job.kinds == ["slow"]) == [
        f"slow_{n}" for n in range(10)
    ]
