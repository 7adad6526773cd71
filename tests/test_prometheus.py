"""Prometheus metrics: counted from the signals in a process, across the
processes of a multiprocess server, and added up in a textfile by jobs run
from cron; the health gauges read from the database when scraped."""

from __future__ import annotations

import datetime
import logging

import pytest
from django.test import override_settings
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.parser import text_string_to_metric_families

from jobclaims import signals
from jobclaims.contrib.prometheus import metrics, textfile
from jobclaims.models import JobRun
from jobclaims.testing import child_environment, race
from tests.helpers import run_python, unanswered_database_url
from tests.monitored import DEAD, FAILING, HEALTHY, OVERDUE, make_monitored_jobs

pytestmark = pytest.mark.django_db(transaction=True)

# Real job processes with jobclaims.contrib.prometheus installed.
PROMETHEUS = {"TESTS_PROMETHEUS": "true"}

LEASE = datetime.timedelta(minutes=5)
WINDOW = "2026-11-29T10:00+00:00"


def sample_values(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return sample_values(text).get((name, frozenset(labels.items())))


def scrape(client) -> str:
    response = client.get("/metrics/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    text: str = response.content.decode()
    return text


@pytest.fixture
def counting():
    """Count claims in this process, as the installed app does from ready()."""
    metrics.connect()
    yield
    metrics.disconnect()


@pytest.mark.usefixtures("counting")
def test_claims_skips_takeovers_failures_and_durations_are_counted(client):
    job = "counted_job"
    run = JobRun.objects.claim(job, "w", lease=LEASE)
    assert run is not None
    JobRun.objects.claim(job, "w", lease=LEASE)  # skipped: held
    run.release(JobRun.Status.FAILED, error="boom")
    retry = JobRun.objects.claim(job, "w", lease=LEASE)  # takes the failed window over
    assert retry is not None
    retry.release()
    JobRun.objects.claim(job, "w", lease=LEASE)  # skipped: succeeded

    text = scrape(client)
    assert value(text, "jobclaims_claims_total", job_name=job) == 2
    assert value(text, "jobclaims_skips_total", job_name=job, reason="held") == 1
    assert value(text, "jobclaims_skips_total", job_name=job, reason="succeeded") == 1
    assert value(text, "jobclaims_takeovers_total", job_name=job, previous_status="failed") == 1
    assert value(text, "jobclaims_failures_total", job_name=job) == 1
    for status in ("failed", "succeeded"):
        assert value(text, "jobclaims_run_duration_seconds_count", job_name=job, status=status) == 1
    assert (
        value(
            text,
            "jobclaims_run_duration_seconds_bucket",
            job_name=job,
            status="succeeded",
            le="1.0",
        )
        == 1
    )


def test_the_health_gauges_say_which_jobs_are_overdue_failing_or_held_by_the_dead(client):
    make_monitored_jobs()
    text = scrape(client)
    assert value(text, "jobclaims_up") == 1
    assert value(text, "jobclaims_overdue_jobs") == 1
    problems = {
        (dict(labels)["job_name"], dict(labels)["problem"])
        for (name, labels), found in sample_values(text).items()
        if name == "jobclaims_job_problem" and found == 1
    }
    assert problems == {
        (OVERDUE, "overdue"),
        (OVERDUE, "missed"),
        (FAILING, "failed"),
        (DEAD, "dead_holder"),
    }
    assert value(text, "jobclaims_missed_runs", job_name=OVERDUE) == 2
    assert value(text, "jobclaims_failures_in_a_row", job_name=FAILING) == 1
    assert value(text, "jobclaims_failures_in_a_row", job_name=HEALTHY) == 0


def test_jobs_in_multiprocess_mode_are_added_up_by_the_servers_view(client, tmp_path, monkeypatch):
    # Two real job processes that share the server's directory, one skips.
    environment = {**PROMETHEUS, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    race("charge_ledger", "--window", WINDOW, "--hold", "0.5", instances=2, env=environment)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    text = scrape(client)
    assert value(text, "jobclaims_claims_total", job_name="charge_ledger") == 1
    assert value(text, "jobclaims_skips_total", job_name="charge_ledger", reason="held") == 1
    assert (
        value(
            text,
            "jobclaims_run_duration_seconds_count",
            job_name="charge_ledger",
            status="succeeded",
        )
        == 1
    )
    assert value(text, "jobclaims_overdue_jobs") == 0


def test_jobs_run_from_cron_add_their_counts_up_in_the_textfile(tmp_path):
    path = tmp_path / "jobclaims.prom"
    environment = {**PROMETHEUS, "TESTS_METRICS_TEXTFILE": str(path)}
    # One runs; the two that skip add to the file at once, and neither count is lost.
    race("charge_ledger", "--window", WINDOW, "--hold", "0.5", instances=3, env=environment)
    text = path.read_text()
    assert value(text, "jobclaims_claims_total", job_name="charge_ledger") == 1
    assert value(text, "jobclaims_skips_total", job_name="charge_ledger", reason="held") == 2
    assert (
        value(
            text,
            "jobclaims_run_duration_seconds_count",
            job_name="charge_ledger",
            status="succeeded",
        )
        == 1
    )
    assert "_created" not in text


def test_the_textfile_adds_counters_and_histograms_and_keeps_other_families(tmp_path):
    path = tmp_path / "jobclaims.prom"
    path.write_text("# TYPE other_metric gauge\nother_metric 7.0\n")
    for seconds in (0.5, 20):
        registry = CollectorRegistry()
        Counter("things", "Things.", ["job"], registry=registry).labels("a").inc(2)
        Histogram("took_seconds", "Took.", buckets=(1, 60), registry=registry).observe(seconds)
        textfile.add(str(path), registry.collect())
    text = path.read_text()
    assert value(text, "things_total", job="a") == 4
    assert value(text, "took_seconds_bucket", le="1.0") == 1
    assert value(text, "took_seconds_bucket", le="60.0") == 2
    assert value(text, "took_seconds_sum") == 20.5
    assert value(text, "other_metric") == 7
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.usefixtures("counting")
def test_a_textfile_that_cannot_be_written_leaves_the_claim_alone(tmp_path, caplog):
    missing = tmp_path / "no such folder" / "jobclaims.prom"
    with (
        override_settings(JOBCLAIMS={"METRICS_TEXTFILE": str(missing)}),
        caplog.at_level(logging.WARNING, logger="jobclaims"),
    ):
        run = JobRun.objects.claim("claimed_anyway", "w", lease=LEASE)
    assert run is not None
    assert f"Could not add jobclaims' metrics to {missing}" in caplog.text


def test_a_process_with_both_multiprocess_mode_and_the_textfile_adds_each_event_once(tmp_path):
    # A worker that claims five windows, as a Celery worker does, in a real process.
    path = tmp_path / "jobclaims.prom"
    done = run_python(
        "from jobclaims.testing import connect_child\n"
        "connect_child()\n"
        "import datetime\n"
        "from jobclaims.models import JobRun\n"
        "for window in range(5):\n"
        "    run = JobRun.objects.claim('worker_job', str(window), lease=datetime.timedelta(1))\n"
        "    run.release()\n",
        env={
            **child_environment(),
            **PROMETHEUS,
            "TESTS_METRICS_TEXTFILE": str(path),
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        },
    )
    assert done.returncode == 0, done.stderr
    assert value(path.read_text(), "jobclaims_claims_total", job_name="worker_job") == 5


@pytest.mark.usefixtures("counting")
def test_a_textfile_that_cannot_be_read_is_set_aside_and_counting_resumes(tmp_path, caplog):
    path = tmp_path / "jobclaims.prom"
    path.write_text('jobclaims_claims_total{job_name="cut short\n')
    with (
        override_settings(JOBCLAIMS={"METRICS_TEXTFILE": str(path)}),
        caplog.at_level(logging.WARNING, logger="jobclaims"),
    ):
        for window in ("a", "b"):
            run = JobRun.objects.claim("healed", window, lease=LEASE)
            assert run is not None
            assert run.release()
    assert value(path.read_text(), "jobclaims_claims_total", job_name="healed") == 2
    assert (tmp_path / "jobclaims.prom.corrupt").read_text().startswith("jobclaims_claims_total")
    [warning] = [record for record in caplog.records if "could not be read" in record.message]
    assert warning.levelno == logging.WARNING


@pytest.mark.usefixtures("counting")
def test_a_failure_whose_duration_is_unknown_is_counted(tmp_path, caplog):
    path = tmp_path / "jobclaims.prom"
    run = JobRun.objects.claim("taken_over", "w", lease=LEASE)
    assert run is not None
    with (
        override_settings(JOBCLAIMS={"METRICS_TEXTFILE": str(path)}),
        caplog.at_level(logging.WARNING),
    ):
        signals.run_finished.send_robust(JobRun, run=run, status="failed", duration=None)
    text = path.read_text()
    assert value(text, "jobclaims_failures_total", job_name="taken_over") == 1
    assert "jobclaims_run_duration_seconds" not in text
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def test_the_metrics_view_answers_with_jobclaims_up_0_when_the_database_does_not(client):
    done = run_python(
        "import django; django.setup()\n"
        "from django.test import RequestFactory\n"
        "from jobclaims.contrib.prometheus.views import metrics\n"
        "response = metrics(RequestFactory().get('/metrics/'))\n"
        "print(response.status_code)\n"
        "print(response.content.decode())\n",
        env={"DATABASE_URL": unanswered_database_url()},
    )
    assert done.returncode == 0, done.stderr
    status, _, text = done.stdout.partition("\n")
    assert status == "200"
    assert value(text, "jobclaims_up") == 0
    assert "jobclaims_job_problem" not in text
    assert "did not answer jobclaims' health reads" in done.stderr
