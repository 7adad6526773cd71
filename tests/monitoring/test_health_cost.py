"""Health reads the same number of queries whatever the number of jobs: a
scrape of a thousand jobs must not pass Prometheus' scrape timeout.

A count, not a time; benchmarks/monitoring.py measures the time.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.test.utils import CaptureQueriesContext

from jobclaims.models import JobRun, ScheduleVersion
from jobclaims.monitoring.health import read_health
from jobclaims.time.clock import database_now
from tests.support.monitored import HOUR, SECOND, hour_start, save_run

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("deployed_now")]


def make_jobs(first: int, last: int) -> None:
    """Hourly jobs ``first`` to ``last`` of each health: healthy, failing, dead,
    overdue, and gone from the code (scheduled by an earlier deploy)."""
    this_hour = hour_start(database_now())
    for n in range(first, last + 1):
        save_run(f"healthy_{n}", this_hour - HOUR + SECOND, JobRun.Status.SUCCEEDED)
        save_run(f"failing_{n}", this_hour - HOUR + SECOND, JobRun.Status.SUCCEEDED)
        save_run(f"failing_{n}", this_hour + SECOND, JobRun.Status.FAILED, error="boom")
        save_run(f"dead_{n}", this_hour + SECOND, JobRun.Status.RUNNING, expires_at=this_hour)
        save_run(f"overdue_{n}", this_hour - 3 * HOUR + SECOND, JobRun.Status.SUCCEEDED)
        save_run(f"gone_{n}", this_hour - 3 * HOUR + SECOND, JobRun.Status.SUCCEEDED)
        ScheduleVersion.objects.create(job=f"gone_{n}", fingerprint="0", schedule="0 * * * *")


def queries_of(read) -> int:
    with CaptureQueriesContext(connections["default"]) as captured:
        read()
    return len(captured.captured_queries)


def test_health_reads_as_many_queries_for_forty_jobs_as_for_four():
    make_jobs(1, 1)
    few = queries_of(read_health)
    make_jobs(2, 10)
    assert queries_of(read_health) == few
    # Failing, dead and overdue, of each of the ten: judged, not skipped.
    health = read_health()
    assert sum(not job.healthy for job in health.jobs) == 30
    assert len(health.gone) == 10


def test_a_scrape_reads_as_many_queries_for_forty_jobs_as_for_four(client):
    make_jobs(1, 1)
    few = queries_of(lambda: client.get("/metrics/"))
    make_jobs(2, 10)
    assert queries_of(lambda: client.get("/metrics/")) == few


def test_a_check_from_cron_sends_the_fourteen_queries_the_docs_say_at_most():
    make_jobs(1, 2)
    # A run going on: the one read more, of how long its job's runs took.
    this_hour = hour_start(database_now())
    save_run("running_1", this_hour + SECOND, JobRun.Status.RUNNING, expires_at=this_hour + HOUR)
    assert queries_of(read_health) == 14

    def check() -> None:
        with pytest.raises(CommandError, match="jobs unhealthy"):
            call_command("jobclaims_status", "--check")

    # docs/monitoring.md: the health reads, and nothing else.
    assert queries_of(check) == 14
