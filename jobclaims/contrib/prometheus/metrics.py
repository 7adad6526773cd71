"""The metrics, and the signal receivers that count claims in them.

Each process counts what happens in it. Where the counts go depends on
``JOBCLAIMS["METRICS_TEXTFILE"]``:

- ``None``: into the process's own metrics, which a server exposes with
  ``jobclaims.contrib.prometheus.views.metrics``; or, in prometheus-client's
  multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), into files in that
  directory that the processes of a server and the jobs that share it all
  add to (``shared``), which the view reads with the processes' own.
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
import os
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
from prometheus_client.mmap_dict import mmap_key
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from jobclaims import signals
from jobclaims.conf import jobclaims_settings
from jobclaims.contrib.prometheus import shared, textfile
from jobclaims.monitoring import bounded
from jobclaims.monitoring.health import Health, read_health

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

    def keyed(self) -> dict[str, list[tuple[str, float]]]:
        """The event as prometheus-client's multiprocess files key it, by the
        kind of file: what the files every process adds to add up (``shared``).

        A histogram's buckets are kept apart there, each observation in the
        first bucket that holds it: the collector adds them up as it reads.
        """
        keyed: dict[str, list[tuple[str, float]]] = {}
        for name, labels in self.counted:
            documentation, names = COUNTERS[name]
            key = mmap_key(name, f"{name}_total", names, list(labels), documentation)
            keyed.setdefault("counter", []).append((key, 1.0))
        if self.took is not None:
            labels, seconds = self.took
            le = next(bound for bound in DURATION_BUCKETS if seconds <= bound)
            keyed["histogram"] = [
                (
                    mmap_key(
                        DURATION,
                        f"{DURATION}_bucket",
                        [*DURATION_LABELS, "le"],
                        [*labels, floatToGoString(le)],
                        DURATION_HELP,
                    ),
                    1.0,
                ),
                (
                    mmap_key(
                        DURATION, f"{DURATION}_sum", DURATION_LABELS, list(labels), DURATION_HELP
                    ),
                    seconds,
                ),
            ]
        return keyed


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
        # prometheus-client's multiprocess mode: files every process adds to.
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not directory:
            process_metrics().count(event)
            return
        try:
            shared.add(directory, event.keyed())
        except OSError as error:
            logger.warning("Could not add jobclaims' metrics to %s: %s", directory, error)
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
    """Gauges of job health, read from the database (``jobclaims.monitoring.health``) when scraped.

    When the database does not answer, or not within ``HEALTH_TIMEOUT``
    (``jobclaims.monitoring.bounded``), ``jobclaims_up`` is 0 and the other
    gauges are left out: the scrape itself succeeds, with the counters the
    process has, inside Prometheus' scrape timeout, so an alert on
    ``jobclaims_up == 0`` can speak.
    """

    def describe(self) -> Iterable[Metric]:
        return [_up(), *_families().values()]

    def collect(self) -> Iterable[Metric]:
        up = _up()
        health = read_in_time()
        if health is None:
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [up, *health_families(health)]


def read_in_time() -> Health | None:
    """The jobs' health, or None (logged) when the claims database did not
    answer within ``HEALTH_TIMEOUT``."""
    try:
        return bounded.within(read_health)
    except DatabaseError as error:
        logger.warning("The claims database did not answer jobclaims' health reads: %s", error)
        return None


def health_exposition(health: Health | None) -> bytes:
    """``HealthCollector``'s gauges for ``health`` (None: the database did not
    answer) in Prometheus' text format, as ``generate_latest()`` writes them.

    Written here rather than by prometheus-client: for a thousand jobs its
    metric families and their formatting cost more than judging the jobs,
    and a scrape must keep its margin on a busy host. A test holds the two
    to the same text.
    """
    lines = [*_head("jobclaims_up", _UP_HELP), f"jobclaims_up {0.0 if health is None else 1.0}"]
    if health is None:
        return _text(lines)
    names = iter(_GAUGES)
    overdue = sum(job.overdue is not None for job in health.jobs)
    lines += [*_head(next(names)), f"jobclaims_overdue_jobs {float(overdue)}"]
    lines += _head(next(names))
    labelled = [(job, _label(job.job)) for job in health.jobs]
    lines += [
        f'jobclaims_job_problem{{job_name="{name}",problem="{kind.replace(" ", "_")}"}} 1.0'
        for job, name in labelled
        for kind in job.kinds
    ]
    lines += _head(next(names))
    lines += [
        f'jobclaims_failures_in_a_row{{job_name="{name}"}} {float(job.failures_in_a_row)}'
        for job, name in labelled
    ]
    lines += _head(next(names))
    lines += [
        f'jobclaims_missed_runs{{job_name="{name}"}} {float(len(job.missed))}'
        for job, name in labelled
    ]
    lines += _head(next(names))
    lines += [
        f'jobclaims_last_success_timestamp_seconds{{job_name="{name}"}} '
        f"{floatToGoString(job.last_success.timestamp())}"
        for job, name in labelled
        if job.last_success is not None
    ]
    lines += [
        *_head(next(names)),
        f"jobclaims_live_schedulers {float(len(health.live_schedulers))}",
    ]
    lines += _head(next(names))
    lines += [f'jobclaims_job_gone{{job_name="{_label(gone.job)}"}} 1.0' for gone in health.gone]
    return _text(lines)


def _head(name: str, documentation: str | None = None) -> list[str]:
    if documentation is None:
        documentation = _GAUGES[name][0]
    escaped = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return [f"# HELP {name} {escaped}", f"# TYPE {name} gauge"]


def _label(value: str) -> str:
    """A label value as the text format quotes it."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _text(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


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
        "slow, no_live_scheduler or hosts_disagree.",
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


_UP_HELP = "1 when the claims database answered the health reads, else 0."


def _up() -> GaugeMetricFamily:
    return GaugeMetricFamily("jobclaims_up", _UP_HELP)
