"""The metrics, and the signal receivers that count claims in them.

Each process counts what happens in it. Where the counts go depends on
``JOBCLAIMS["METRICS_TEXTFILE"]``:

- ``None``: into the process's own metrics, which a server exposes with
  ``jobclaims.contrib.prometheus.views.metrics``. prometheus-client's
  multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) adds up the processes of
  a server, and of the jobs that share its directory.
- a path: every event is added to the counts in that file, under a lock,
  for node_exporter's textfile collector to expose. For jobs run from cron:
  a process that lives a second is never scraped, and a push gateway keeps
  a counter per push instead of adding them up.

The gauges of job health are read from the database when they are scraped
(``HealthCollector``), so they are right even when no job has run at all.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobclaims import signals
from jobclaims.conf import jobclaims_settings
from jobclaims.contrib.prometheus import textfile
from jobclaims.health import job_health

if TYPE_CHECKING:
    from jobclaims.models import JobRun

logger = logging.getLogger("jobclaims")

#: Run durations, in seconds: from a second to four hours.
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, float("inf"))


class Metrics:
    """jobclaims' counters and histogram, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.claims = Counter(
            "jobclaims_claims",
            "Windows claimed, takeovers included.",
            ["job"],
            registry=registry,
        )
        self.skips = Counter(
            "jobclaims_skips",
            "Instances that stepped aside, by reason: held, succeeded, overlap or paused.",
            ["job", "reason"],
            registry=registry,
        )
        self.takeovers = Counter(
            "jobclaims_takeovers",
            "Windows taken over, by the status replaced: running (its holder died), "
            "failed, or succeeded (forced).",
            ["job", "previous_status"],
            registry=registry,
        )
        self.failures = Counter(
            "jobclaims_failures",
            "Runs recorded failed.",
            ["job"],
            registry=registry,
        )
        self.duration = Histogram(
            "jobclaims_run_duration_seconds",
            "How long runs took by the database clock, by outcome: succeeded or failed.",
            ["job", "status"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )


_process_metrics: Metrics | None = None


def process_metrics() -> Metrics:
    """This process's metrics, in prometheus-client's default registry."""
    global _process_metrics
    if _process_metrics is None:
        _process_metrics = Metrics(REGISTRY)
    return _process_metrics


def record(update: Callable[[Metrics], None]) -> None:
    """Count an event: in this process's metrics, or added to the textfile.

    Never raises: a metric that cannot be written must not fail the claim
    whose signal it counts.
    """
    path = jobclaims_settings.metrics_textfile
    if path is None:
        update(process_metrics())
        return
    event = Metrics(CollectorRegistry(auto_describe=False))
    update(event)
    try:
        textfile.add(path, event.registry)
    except OSError as error:
        logger.warning("Could not add jobclaims' metrics to %s: %s", path, error)


def _acquired(sender: type[JobRun], run: JobRun, **kwargs: Any) -> None:
    record(lambda metrics: metrics.claims.labels(run.job).inc())


def _taken_over(sender: type[JobRun], run: JobRun, previous_status: str, **kwargs: Any) -> None:
    record(lambda metrics: metrics.takeovers.labels(run.job, previous_status).inc())


def _skipped(sender: type[JobRun], job: str, reason: str, **kwargs: Any) -> None:
    record(lambda metrics: metrics.skips.labels(job, reason).inc())


def _finished(
    sender: type[JobRun], run: JobRun, status: str, duration: datetime.timedelta, **kwargs: Any
) -> None:
    def update(metrics: Metrics) -> None:
        metrics.duration.labels(run.job, status).observe(duration.total_seconds())
        if status == "failed":
            metrics.failures.labels(run.job).inc()

    record(update)


_RECEIVERS = (
    (signals.claim_acquired, _acquired),
    (signals.claim_taken_over, _taken_over),
    (signals.claim_skipped, _skipped),
    (signals.run_finished, _finished),
)
_UID = "jobclaims.contrib.prometheus"


def connect() -> None:
    """Count claims from the signals; called once, from the app's ``ready()``."""
    for signal, receiver in _RECEIVERS:
        signal.connect(receiver, dispatch_uid=_UID)


def disconnect() -> None:
    """Stop counting claims."""
    for signal, _receiver in _RECEIVERS:
        signal.disconnect(dispatch_uid=_UID)


class HealthCollector(Collector):
    """Gauges of job health, read from the database (``jobclaims.health``) when scraped."""

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        jobs = job_health()
        overdue, problem, in_a_row = self._families()
        overdue.add_metric([], sum(health.overdue is not None for health in jobs))
        for health in jobs:
            for kind in health.kinds:
                problem.add_metric([health.job, kind.replace(" ", "_")], 1)
            in_a_row.add_metric([health.job], health.failures_in_a_row)
        return [overdue, problem, in_a_row]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "jobclaims_overdue_jobs",
                "Jobs whose due window has not succeeded within its grace.",
            ),
            GaugeMetricFamily(
                "jobclaims_job_problem",
                "1 for each job and what is wrong with it: overdue, failed or dead_holder.",
                labels=["job", "problem"],
            ),
            GaugeMetricFamily(
                "jobclaims_failures_in_a_row",
                "Finished runs of the job that failed since its last success.",
                labels=["job"],
            ),
        )
