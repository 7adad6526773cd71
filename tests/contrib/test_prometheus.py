"""Prometheus metrics: counted from the signals in a process, across the
processes of a multiprocess server, and added up in a textfile by jobs run
from cron; the health gauges read from the database when scraped."""

from __future__ import annotations

import datetime
import fnmatch
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from jobclaims import signals
from jobclaims.contrib.prometheus import metrics, textfile
from jobclaims.models import JobRun
from jobclaims.monitoring.health import read_health
from jobclaims.testing import child_environment, race
from jobclaims.time.clock import database_now
from tests.support.helpers import once_across_the_databases, run_python, unanswered_database_url
from tests.support.monitored import DEAD, FAILING, HEALTHY, OVERDUE, make_monitored_jobs, save_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("deployed_now")]

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


def claim_and_release(job: str) -> list[str]:
    """The statements of a claim and its release, by verb and table."""
    with CaptureQueriesContext(connection) as queries:
        run = JobRun.objects.claim(job, WINDOW, lease=LEASE)
        assert run is not None
        assert run.release()
    return [re.sub(r"'[^']*'|\b\d+\b", "?", query["sql"]) for query in queries]


def test_counting_a_claim_and_its_release_sends_the_same_statements_as_without():
    plain = claim_and_release("released_plain")
    metrics.connect()
    try:
        counted = claim_and_release("released_counted")
    finally:
        metrics.disconnect()
    counted = [sql.replace("released_counted", "released_plain") for sql in counted]
    if connection.vendor == "sqlite":
        # SQLite's release commits within its UPDATE, which returns nothing
        # (see SQLiteStatements): the finish time is read back for the metrics.
        assert counted[:-1] == plain
        assert counted[-1].startswith('SELECT "jobclaims_jobrun"."finished_at"')
    else:
        assert counted == plain
    # The duration, by the database's clock, from what the release returned.
    run = JobRun.objects.get(job="released_counted")
    assert run.finished_at is not None
    labels = {"job_name": "released_counted", "status": "succeeded"}
    observed = REGISTRY.get_sample_value("jobclaims_run_duration_seconds_sum", labels)
    assert observed == (run.finished_at - run.claimed_at).total_seconds()


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


class Families(Collector):
    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def test_the_health_gauges_written_by_hand_are_what_prometheus_client_writes():
    make_monitored_jobs()
    save_run('quoted "job" \\ with\na newline', database_now(), JobRun.Status.FAILED)
    health = read_health()
    registry = CollectorRegistry()
    up = GaugeMetricFamily(
        "jobclaims_up", "1 when the claims database answered the health reads, else 0."
    )
    up.add_metric([], 1)
    registry.register(Families([up, *metrics.health_families(health)]))
    assert metrics.health_exposition(health).decode() == generate_latest(registry).decode()
    down = CollectorRegistry()
    up = GaugeMetricFamily(
        "jobclaims_up", "1 when the claims database answered the health reads, else 0."
    )
    up.add_metric([], 0)
    down.register(Families([up]))
    assert metrics.health_exposition(None) == generate_latest(down)


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
    # Added to files every process shares: none of the processes' own.
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "counter_jobclaims.db",
        "histogram_jobclaims.db",
    ]


#: A process that forks ``count`` processes, each adding one event's counts
#: to the shared files and exiting: cheap job processes that only count.
FORKS = """\
import json, os, sys
from jobclaims.contrib.prometheus import shared

count, directory, keyed = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
running, failed = set(), 0
for _ in range(count):
    if len(running) >= 8:
        pid, status = os.wait()
        running.discard(pid)
        failed += status != 0
    pid = os.fork()
    if pid == 0:
        try:
            shared.add(directory, keyed)
        finally:
            os._exit(0 if sys.exc_info()[0] is None else 1)
    running.add(pid)
for pid in running:
    failed += os.waitpid(pid, 0)[1] != 0
print(failed)
"""


def multiprocess_scrape(directory: Path) -> str:
    """What the metrics view of a server just started would serve, in a process of its own."""
    done = run_python(
        "import django; django.setup()\n"
        "from django.test import RequestFactory\n"
        "from jobclaims.contrib.prometheus.views import metrics\n"
        "print(metrics(RequestFactory().get('/metrics/')).content.decode())\n",
        env={
            "PROMETHEUS_MULTIPROC_DIR": str(directory),
            "DATABASE_URL": unanswered_database_url(),
            "PYTHONPATH": os.getcwd(),
        },
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.xdist_group("prometheus")
def test_ten_thousand_job_processes_leave_two_files_in_the_multiprocess_directory(tmp_path):
    once_across_the_databases()
    event = metrics.Event(
        counted=(("jobclaims_claims", ("counted_job",)),),
        took=(("counted_job", "succeeded"), 0.5),
    )
    # Unmeasured (scripts/measure-coverage): measured, each of the 10,000
    # processes writes a coverage file of its own on its way out, which
    # took this test from 14 s to 203 s; shared.add() is measured by the
    # tests above, in processes of their own.
    unmeasured = {k: v for k, v in os.environ.items() if k != "COVERAGE_PROCESS_START"}
    done = subprocess.run(
        [sys.executable, "-c", FORKS, "10000", str(tmp_path), json.dumps(event.keyed())],
        env={**unmeasured, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "counter_jobclaims.db",
        "histogram_jobclaims.db",
    ]
    assert all(path.stat().st_size <= 1 << 16 for path in tmp_path.iterdir())
    text = multiprocess_scrape(tmp_path)
    # Every count of every process, none lost to another's.
    assert value(text, "jobclaims_claims_total", job_name="counted_job") == 10_000
    labels = {"job_name": "counted_job", "status": "succeeded"}
    assert value(text, "jobclaims_run_duration_seconds_count", **labels) == 10_000
    assert value(text, "jobclaims_run_duration_seconds_sum", **labels) == 5_000
    assert value(text, "jobclaims_run_duration_seconds_bucket", le="1.0", **labels) == 10_000


@pytest.mark.usefixtures("counting")
def test_counts_outlive_a_server_restart_and_a_directory_emptied_under_a_running_process(
    tmp_path, monkeypatch
):
    """This process counts as a scheduler does, for as long as it lives; each
    scrape is a server just started, as after a restart."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    for window in ("a", "b"):
        run = JobRun.objects.claim("long_lived", window, lease=LEASE)
        assert run is not None
        assert run.release()
    for _restart in range(2):
        text = multiprocess_scrape(tmp_path)
        assert value(text, "jobclaims_claims_total", job_name="long_lived") == 2
    # Emptied as prometheus-client asks for its own files: the next count is
    # not hidden, it starts the counter again (a reset, which rate() reads).
    for path in tmp_path.iterdir():
        path.unlink()
    assert JobRun.objects.claim("long_lived", "c", lease=LEASE) is not None
    assert (
        value(multiprocess_scrape(tmp_path), "jobclaims_claims_total", job_name="long_lived") == 1
    )


def test_jobs_run_from_cron_add_their_counts_up_in_the_textfile(tmp_path):
    path = tmp_path / "jobclaims.prom"
    environment = {**PROMETHEUS, "TESTS_METRICS_TEXTFILE": str(path)}
    # One runs; the two that skip add to the file at once, and neither count is lost.
    race("charge_ledger", "--window", WINDOW, "--hold", "0.5", instances=3, env=environment)
    text = path.read_text()
    assert value(text, "jobclaims_claims_total", job_name="charge_ledger") == 1
    # Each skip says "held", or "succeeded" from a copy a loaded machine woke
    # after the run had ended: counted once either way.
    skips = [
        value(text, "jobclaims_skips_total", job_name="charge_ledger", reason=reason) or 0
        for reason in ("held", "succeeded")
    ]
    assert sum(skips) == 2
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


def test_the_documented_clean_up_deletes_the_per_process_files_and_keeps_jobclaims():
    # docs/monitoring.md: find "$PROMETHEUS_MULTIPROC_DIR" -name '*_[0-9]*.db' -delete
    documented = "*_[0-9]*.db"
    per_process = ["counter_1234.db", "gauge_all_77.db", "histogram_8.db"]
    shared = ["counter_jobclaims.db", "histogram_jobclaims.db"]
    assert all(fnmatch.fnmatchcase(name, documented) for name in per_process)
    assert not any(fnmatch.fnmatchcase(name, documented) for name in shared)
    docs = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"
    assert f"-name '{documented}' -delete" in docs.read_text()
