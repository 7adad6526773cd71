"""Metrics added up in a file, for node_exporter's textfile collector.

A job run from cron lives too briefly to be scraped, so each event is added
to the counts already in the file: under an exclusive lock on a file beside
it, so that two processes never lose each other's counts, and written to a
temporary file that replaces it whole, so node_exporter never reads half.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample


def add(path: str, registry: CollectorRegistry) -> None:
    """Add the samples of ``registry``'s counters and histograms to those in ``path``."""
    target = Path(path)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            text = target.read_text()
        except FileNotFoundError:
            text = ""
        families = {family.name: family for family in text_string_to_metric_families(text)}
        for family in registry.collect():
            kept = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type)
            )
            kept.samples = _sum(kept.samples, family.samples)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_bytes(generate_latest(_Families(families.values())))
        os.replace(temporary, target)


def _sum(kept: list[Sample], added: list[Sample]) -> list[Sample]:
    """``kept`` with each of ``added`` added to its like; new ones after them."""
    totals: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in [*kept, *added]:
        # When a process created a series says nothing of the sum.
        if sample.name.endswith("_created"):
            continue
        key = (sample.name, tuple(sorted(sample.labels.items())))
        totals[key] = totals.get(key, 0.0) + sample.value
    return [Sample(name, dict(labels), value) for (name, labels), value in totals.items()]


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]):
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families
