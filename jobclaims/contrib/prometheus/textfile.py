"""Metrics added up in a file, for node_exporter's textfile collector.

A job run from cron lives too briefly to be scraped, so each event is added
to the counts already in the file: under an exclusive lock on a file beside
it, so that two processes never lose each other's counts, and written to a
temporary file that replaces it whole, so node_exporter never reads half.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

logger = logging.getLogger("jobclaims")


def add(path: str, added: Iterable[Metric]) -> None:
    """Add the samples of the counters and histograms ``added`` to those in ``path``.

    A file that cannot be parsed (cut short by a full disk, or edited by
    hand) is set aside as ``<path>.corrupt`` with a warning, and counting
    starts again from this event: node_exporter sees a counter reset, which
    ``rate()`` and ``increase()`` handle, rather than counts that stop.
    """
    target = Path(path)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            text = target.read_text()
        except FileNotFoundError:
            text = ""
        families = _parsed(target, text)
        for family in added:
            kept = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type)
            )
            kept.samples = _sum(kept.samples, family.samples)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_bytes(generate_latest(_Families(families.values())))
        os.replace(temporary, target)


def _parsed(target: Path, text: str) -> dict[str, Metric]:
    try:
        return {family.name: family for family in text_string_to_metric_families(text)}
    except ValueError as error:
        aside = target.with_name(f"{target.name}.corrupt")
        os.replace(target, aside)
        logger.warning(
            "jobclaims' metrics textfile %s could not be read (%s); set aside as %s, "
            "counting starts again",
            target,
            error,
            aside,
        )
        return {}


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
