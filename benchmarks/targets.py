"""The figures the benchmark promises, and whether a run met them.

Each target is checked against a ratio measured within one run, never
against an absolute time: on a shared machine only ratios travel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The history size the history target is stated for.
HISTORY_ROWS = 1_000_000


@dataclass(frozen=True)
class Target:
    name: str
    #: How the target reads beside its figure, e.g. "<= 1.5x".
    wanted: str
    #: The backends it applies to; elsewhere the figure is shown alone.
    vendors: tuple[str, ...]
    figure: Callable[[dict[str, Any]], float | int]
    met: Callable[[float | int], bool]
    #: Stated for a history of HISTORY_ROWS: a smaller run does not judge it.
    needs_full_history: bool = False


TARGETS = (
    Target(
        "uncontended claim + release / raw floor",
        "<= 1.5x",
        ("postgresql", "mysql"),
        lambda results: results["uncontended"]["ratio_to_floor"],
        lambda ratio: ratio <= 1.5,
    ),
    Target(
        "SQL statements per claim + release",
        "<= 3",
        ("postgresql",),
        lambda results: results["uncontended"]["statements"],
        lambda count: count <= 3,
    ),
    Target(
        "races at K = 2, 8, 32 without exactly 1 winner",
        "0",
        ("postgresql", "mysql", "sqlite"),
        lambda results: sum(
            winners != 1 for race in results["contention"] for winners in race["winners_per_round"]
        ),
        lambda count: count == 0,
    ),
    Target(
        "loser p99 at K = 32 / uncontended claim",
        "<= 2x",
        ("postgresql", "mysql", "sqlite"),
        lambda results: results["contention"][-1]["loser_p99_ratio"],
        lambda ratio: ratio <= 2,
    ),
    Target(
        f"claim + release at {HISTORY_ROWS:,} rows / at 0",
        "<= 1.2x",
        ("postgresql", "mysql", "sqlite"),
        lambda results: results["history"]["ratio"],
        lambda ratio: ratio <= 1.2,
        needs_full_history=True,
    ),
    Target(
        "prune, rows deleted per second",
        ">= 50,000",
        ("postgresql", "mysql", "sqlite"),
        lambda results: results["prune"]["rows_per_second"],
        lambda rate: rate >= 50_000,
        needs_full_history=True,
    ),
    Target(
        "prune, longest DELETE (ms, locks held)",
        "<= 100",
        ("postgresql", "mysql", "sqlite"),
        lambda results: results["prune"]["longest_ms"].get("DELETE", 0),
        lambda milliseconds: milliseconds <= 100,
        needs_full_history=True,
    ),
)


def check(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target's figure in ``results``, and whether it is met.

    ``met`` is ``None`` where a target does not apply to the backend, and
    where the run was smaller than the target is stated for.
    """
    vendor = results["database"]["vendor"]
    checked = []
    for target in TARGETS:
        figure = target.figure(results)
        applies = vendor in target.vendors and (
            not target.needs_full_history or results["history"]["rows"] >= HISTORY_ROWS
        )
        checked.append(
            {
                "target": target.name,
                "wanted": target.wanted,
                "figure": figure,
                "met": target.met(figure) if applies else None,
            }
        )
    return checked
