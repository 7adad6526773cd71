"""What each benchmark that starts processes does around its measurement.

Each runs on a database of its own, made for the run and dropped after it
whatever happens (its processes find it by ``BENCH_DATABASE_NAME``), and
leaves its figures in test-output/, where docs/performance.md's numbers are
read from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import django

OUTPUT = Path("test-output")


@contextmanager
def scratch_database() -> Iterator[str]:
    """Set Django up on benchmarks.settings, create a test database of the
    default connection's kind, and yield its name; drop it on the way out.

    Always the benchmarks' own settings, whatever the shell exports: they
    name a scratch database that is safe to drop without asking.
    """
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    django.setup()
    from django.db import connection

    if connection.vendor == "sqlite":
        # A file, not memory: the benchmark's processes share it.
        Path(connection.settings_dict["TEST"]["NAME"]).parent.mkdir(exist_ok=True)
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        yield name
    finally:
        connection.creation.destroy_test_db(name, verbosity=0)


def write_figures(results: dict[str, Any], path: Path, table: str) -> None:
    """Print ``table`` and write ``results`` to ``path`` (in ``OUTPUT``, as a rule)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(table)
    print(f"\nFigures written to {path}")


def rank(ordered: Sequence[float], share: float) -> float:
    """The value ``share`` of the way up ``ordered`` (sorted, not empty)."""
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


def percentiles(ordered: Sequence[float], scale: float = 1.0, digits: int = 3) -> dict[str, float]:
    """p50, p99 and the maximum of ``ordered`` (sorted), each times
    ``scale`` (1000: seconds to milliseconds); nothing for no values."""
    if not ordered:
        return {}
    return {
        "p50": round(scale * rank(ordered, 0.5), digits),
        "p99": round(scale * rank(ordered, 0.99), digits),
        "max": round(scale * ordered[-1], digits),
    }
