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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from jobclaims import signals
from jobclaims.conf import jobclaims_settings
from jobclaims.contrib.prometheus import textfile
from jobclaims.health import Health, read_health

if TYPE_CHECKING:
    from jobclaims.models import JobRun

logger = logging.getLogger("jobclaims")

#: Run durations, in seconds: from a second to four hours.
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, float("inf"))


#: jobclaims' counters: what each counts, and its labels.
COUNTERS: dict[str, tuple[str, list[str]]] = {
    "jobclaims_claims": ("Windows claimed, takeovers included.", ["job_name"]),
    "jobclaims_skips": (
        "Instances that stepped aside, by reason: held, succeeded, overlap, failed, "
        "slot-ran or paused.",
        ["job_name", "reason"],
    ),
    "jobclaims_takeovers": (
        "Windows taken over, by the status replaced: running (its holder died), "
        "failed, or succeeded (forced).",
        ["job_name", "previous_status"],
    ),
    "jobclaims_failures": ("Runs recorded failed.", ["job_name"]),
}
DURATION = "jobclaims_run_duration_seconds"
DURATION_HELP = "How long runs took by the database clock, by outcome: succeeded or failed."
DURATION_LABELS = ["job_name", "status"]


@dataclass(frozen=True)
class Event:
    """One thing that happened to a claim, as the metrics count it."""

    #: Each counter it adds one to, with its label values.
    counted: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: A finished run's label values and duration in seconds, if known.
    took: tuple[tuple[str, ...], float] | None = None

    def families(self) -> list[Metric]:
        """The event alone, as metric families: what the textfile adds up.

        Built here rather than by prometheus-client's counters, whose values
        in multiprocess mode are the process's running totals, not the event.
        """
        families: list[Metric] = []
        for name, labels in self.counted:
            documentation, names = COUNTERS[name]
            counter = CounterMetricFamily(name, documentation, labels=names)
            counter.add_metric(list(labels), 1)
            families.append(counter)
        if self.took is not None:
            labels, seconds = self.took
            histogram = HistogramMetricFamily(DURATION, DURATION_HELP, labels=DURATION_LABELS)
            buckets = [(_bound(le), 1.0 if seconds <= le else 0.0) for le in DURATION_BUCKETS]
            histogram.add_metric(list(labels), buckets, sum_value=seconds)
            families.append(histogram)
        return families


def _bound(le: float) -> str:
    return "+Inf" if le == float("inf") else str(float(le))


class Metrics:
    """jobclaims' counters and histogram, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry):
        self.counters = {
            name: Counter(name, documentation, labels, registry=registry)
            for name, (documentation, labels) in COUNTERS.items()
        }
        self.duration = Histogram(
            DURATION, DURATION_HELP, DURATION_LABELS, buckets=DURATION_BUCKETS, registry=registry
        )

    def count(self, event: Event) -> None:
        for name, labels in event.counted:
            self.counters[name].labels(*labels).inc()
        if event.took is not None:
            labels, seconds = event.took
            self.duration.labels(*labels).observe(seconds)


_process_metrics: Metrics | None = None


def process_metrics() -> Metrics:
    """This process's metrics, in prometheus-client's default registry."""
    global _process_metrics
    if _process_metrics is None:
        _process_metrics = Metrics(REGISTRY)
    return _process_metrics


def record(event: Event) -> None:
    """Count an event: in this process's metrics, or added to the textfile.

    Never raises: a metric that cannot be written must not fail the claim
    whose signal it counts.
    """
    path = jobclaims_settings.metrics_textfile
    if path is None:
        process_metrics().count(event)
        return
    try:
        textfile.add(path, event.families())
    except OSError as error:
        logger.warning("Could not add jobclaims' metrics to %s: %s", path, error)


def _acquired(sender: type[JobRun], run: JobRun, **kwargs: Any) -> None:
    record(Event(counted=(("jobclaims_claims", (run.job,)),)))


def _taken_over(sender: type[JobRun], run: JobRun, previous_status: str, **kwargs: Any) -> None:
    record(Event(counted=(("jobclaims_takeovers", (run.job, previous_status)),)))


def _skipped(sender: type[JobRun], job: str, reason: str, **kwargs: Any) -> None:
    record(Event(counted=(("jobclaims_skips", (job, reason)),)))


def _finished(
    sender: type[JobRun],
    run: JobRun,
    status: str,
    duration: datetime.timedelta | None,
    **kwargs: Any,
) -> None:
    failed = (("jobclaims_failures", (run.job,)),) if status == "failed" else ()
    # None when the run's row was taken over before its duration was read:
    # the failure still counts, the duration is not known.
    took = None if duration is None else ((run.job, status), duration.total_seconds())
    record(Event(counted=failed, took=took))


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
    """Gauges of job health, read from the database (``jobclaims.health``) when scraped.

    When the database does not answer, ``jobclaims_up`` is 0 and the other
    gauges are left out: the scrape itself succeeds, with the counters the
    process has, so an alert on ``jobclaims_up == 0`` can speak.
    """

    def describe(self) -> Iterable[Metric]:
        return [_up(), *_families().values()]

    def collect(self) -> Iterable[Metric]:
        up = _up()
        try:
            health = read_health()
        except DatabaseError as error:
            logger.warning("The claims database did not answer jobclaims' health reads: %s", error)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [up, *health_families(health)]


def health_families(health: Health) -> list[GaugeMetricFamily]:
    """The gauges of the jobs' and the schedulers' health."""
    families = _families()
    overdue = sum(job.overdue is not None for job in health.jobs)
    families["jobclaims_overdue_jobs"].add_metric([], overdue)
    families["jobclaims_live_schedulers"].add_metric([], len(health.live_schedulers))
    for job in health.jobs:
        for kind in job.kinds:
            families["jobclaims_job_problem"].add_metric([job.job, kind.replace(" ", "_")], 1)
        families["jobclaims_failures_in_a_row"].add_metric([job.job], job.failures_in_a_row)
        families["jobclaims_missed_runs"].add_metric([job.job], len(job.missed))
        if job.last_success is not None:
            families["jobclaims_last_success_timestamp_seconds"].add_metric(
                [job.job], job.last_success.timestamp()
            )
    for gone in health.gone:
        families["jobclaims_job_gone"].add_metric([gone.job], 1)
    return list(families.values())


#: Each health gauge: what it says, and its labels.
_GAUGES: dict[str, tuple[str, list[str]]] = {
    "jobclaims_overdue_jobs": ("Jobs whose due window or fire has not succeeded in its grace.", []),
    "jobclaims_job_problem": (
        "1 for each job and what is wrong with it: overdue, failed, dead_holder, missed, "
        "no_live_scheduler or hosts_disagree.",
        ["job_name", "problem"],
    ),
    "jobclaims_failures_in_a_row": (
        "Finished runs of the job that failed since its last success.",
        ["job_name"],
    ),
    "jobclaims_missed_runs": (
        "The job's windows or fires in the missed look-back that no instance claimed.",
        ["job_name"],
    ),
    "jobclaims_last_success_timestamp_seconds": (
        "When a run of the job last succeeded, in Unix time.",
        ["job_name"],
    ),
    "jobclaims_live_schedulers": (
        "Schedulers seen within JOBCLAIMS['SCHEDULER_GRACE'].",
        [],
    ),
    "jobclaims_job_gone": (
        "1 for each job gone from the code: a scheduler ran it once, nothing runs it now; "
        "not watched.",
        ["job_name"],
    ),
}


def _families() -> dict[str, GaugeMetricFamily]:
    return {
        name: GaugeMetricFamily(name, documentation, labels=labels)
        for name, (documentation, labels) in _GAUGES.items()
    }


def _up() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "jobclaims_up", "1 when the claims database answered the health reads, else 0."
    )
