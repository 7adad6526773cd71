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
    #: The section of the results it is measured in: a run without it skips it.
    section: str
    #: How the target reads beside its figure, e.g. "<= 1.5x".
    wanted: str
    #: The backends it applies to; elsewhere the figure is shown alone.
    vendors: tuple[str, ...]
    #: ``None`` where the run could not measure it.
    figure: Callable[[dict[str, Any]], float | int | None]
    met: Callable[[float | int], bool]
    #: Stated for a history of HISTORY_ROWS: a smaller run does not judge it.
    needs_full_history: bool = False


TARGETS = (
    Target(
        "uncontended claim + release / raw floor",
        "uncontended",
        "<= 1.5x",
        ("postgresql", "mysql"),
        lambda results: results["uncontended"]["ratio_to_floor"],
        lambda ratio: ratio <= 1.5,
    ),
    Target(
        "slowest other public way in / raw floor",
        "paths",
        "<= 1.5x",
        ("postgresql", "mysql"),
        lambda results: max(_ways_in(results)[1:]),
        lambda ratio: ratio <= 1.5,
    ),
    Target(
        "slowest public way in / best correct peer",
        "paths",
        "<= 1.5x",
        ("postgresql", "mysql"),
        lambda results: _over_best_peer(results),
        lambda ratio: ratio <= 1.5,
    ),
    Target(
        "SQL statements per claim + release",
        "uncontended",
        "<= 3",
        ("postgresql",),
        lambda results: results["uncontended"]["statements"],
        lambda count: count <= 3,
    ),
    Target(
        "races at K = 2, 8, 32 without exactly 1 winner",
        "contention",
        "0",
        ("postgresql", "mysql", "sqlite"),
        lambda results: sum(
            winners != 1 for race in results["contention"] for winners in race["winners_per_round"]
        ),
        lambda count: count == 0,
    ),
    Target(
        f"claim + release at {HISTORY_ROWS:,} rows / at 0",
        "history",
        "<= 1.2x",
        ("postgresql", "mysql", "sqlite"),
        lambda results: results["history"]["ratio"],
        lambda ratio: ratio <= 1.2,
        needs_full_history=True,
    ),
    Target(
        "prune, rows deleted per second",
        "prune",
        ">= 50,000",
        ("postgresql", "mysql", "sqlite"),
        lambda results: results["prune"]["rows_per_second"],
        lambda rate: rate >= 50_000,
        needs_full_history=True,
    ),
    Target(
        "prune, longest DELETE (ms, locks held)",
        "prune",
        "<= 100",
        ("postgresql", "mysql", "sqlite"),
        lambda results: results["prune"]["longest_ms"].get("DELETE", 0),
        lambda milliseconds: milliseconds <= 100,
        needs_full_history=True,
    ),
)


def _over_best_peer(results: dict[str, Any]) -> float | None:
    """The slowest public way in over the fastest correct peer, both against
    the floor of the same rounds; ``None`` where no correct peer ran."""
    correct = [peer["ratio_to_floor"] for peer in results["peers"].values() if peer["correct"]]
    if not correct:
        return None
    return round(max(_ways_in(results)) / min(correct), 2)


#: The ways in timed but not held to the targets: a ``JobCommand`` runs
#: once in a process that parses its options once (cron's, a scheduler's
#: fork), where ``call_command`` here builds its parser on every call.
NOT_TARGETED = ("JobCommand (call_command)",)


def _ways_in(results: dict[str, Any]) -> list[float]:
    """Each public way in's ratio to the floor, ``JobRun.objects.claim()``'s
    first, but ``NOT_TARGETED``. A way made in a framework's call (a Celery
    task) counts less that call alone, timed in the same rounds: a project
    pays it with or without a claim."""
    less_host = {
        host["path"]: host["path_less_host_to_floor"] for host in results.get("hosts", {}).values()
    }
    ways = [results["uncontended"]["ratio_to_floor"]]
    ways += [
        less_host.get(name, path["ratio_to_floor"])
        for name, path in results["paths"].items()
        if name not in NOT_TARGETED
    ]
    return ways


def check(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target's figure in ``results``, and whether it is met.

    ``met`` is ``None`` where a target does not apply to the backend, where
    the run was smaller than the target is stated for, and where the figure
    could not be measured.
    """
    vendor = results["database"]["vendor"]
    checked = []
    for target in TARGETS:
        if target.section not in results:
            continue
        figure = target.figure(results)
        applies = vendor in target.vendors and (
            not target.needs_full_history or results["history"]["rows"] >= HISTORY_ROWS
        )
        checked.append(
            {
                "target": target.name,
                "wanted": target.wanted,
                "figure": figure,
                "met": target.met(figure) if applies and figure is not None else None,
            }
        )
    return checked
