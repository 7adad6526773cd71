"""The benchmark's figures as the table ``make bench`` prints."""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmarks.targets import NOT_TARGETED

_RAW_CLAIM = {
    "postgresql": "INSERT ... ON CONFLICT DO NOTHING RETURNING",
    "mysql": "INSERT IGNORE ... RETURNING",
    "sqlite": "INSERT OR IGNORE ... RETURNING",
}

#: The widths of the ways-in and peers tables' name and statements columns.
_NAME, _VERBS = 40, 56


def table(results: dict[str, Any]) -> str:
    lines = _heading(results)
    lines += _uncontended(results)
    lines += _paths(results)
    lines += _peers(results)
    # A --claims-only run has none of the rest.
    if "contention" in results:
        lines += _contention(results)
    # A --contention-only run has none of these.
    for name, section in (("history", _history), ("prune", _prune), ("throughput", _throughput)):
        if name in results:
            lines += section(results[name])
    lines += _targets(results["targets"])
    steps = ", ".join(f"{name} {seconds:g} s" for name, seconds in results["step_seconds"].items())
    lines.append(f"\nSteps: {steps}")
    return "\n".join(lines)


def _heading(results: dict[str, Any]) -> list[str]:
    database, machine = results["database"], results["machine"]
    durability = ", ".join(f"{name}={value}" for name, value in database["durability"].items())
    before, after = machine["load_average_before"][0], machine["load_average_after"][0]
    code = results["code"]
    changed = f", with changes to {', '.join(code['changed'])}" if code["changed"] else ""
    return [
        f"jobclaims claim benchmark: {database['name']} {database['version']} ({durability})",
        f"{machine['cpus']} CPUs ({machine['cpu']}), {machine['memory_gib']} GiB, "
        f"{machine['system']}, Python {machine['python']}, Django {machine['django']}",
        f"load average {before} at the start, {after} at the end; {results['seconds']} s in all",
        f"code: commit {code['commit']}{changed}",
    ]


def _row(label: str, samples: dict[str, Any] | None) -> str:
    if samples is None:
        return f"   {label:<50}{'unavailable':>24}"
    return f"   {label:<50}{samples['median_us']:>12,.1f}{samples['p99_us']:>12,.1f}"


def _uncontended(results: dict[str, Any]) -> list[str]:
    floor, claim = results["floor"], results["uncontended"]
    trips = claim["round_trips"]
    wire = (
        f"   round trips on the wire: {trips} (raw floor: {floor['round_trips']})"
        if trips is not None
        else "   round trips: none (SQLite runs in the process)"
    )
    return [
        "",
        f"{'1. Floor, measured in the same rounds':<53}{'median us':>12}{'p99 us':>12}",
        _row("SELECT 1 round trip", floor["round_trip"]),
        _row(f"raw claim: {_RAW_CLAIM[results['database']['vendor']]}", floor["claim"]),
        _row("raw claim + raw release (UPDATE)", floor["claim_and_release"]),
        "2. claim() + release(), one process, a new window each time",
        _row("claim()", claim["claim"]),
        _row("claim() + release()", claim["claim_and_release"]),
        f"   SQL statements per cycle (CaptureQueriesContext): {claim['statements']}: "
        + " ".join(claim["sequence"]),
        wire,
        _row("client CPU time per cycle, claim() + release()", claim["cpu"]),
        _row("client CPU time per cycle, raw floor", floor["cpu"]),
        f"   claim + release / raw floor (median of per-round ratios): {claim['ratio_to_floor']}x",
    ]


def _paths(results: dict[str, Any]) -> list[str]:
    """Each public way to claim, beside the floor and claim() in the same rounds."""
    floor, claim = results["floor"], results["uncontended"]
    rows = {
        "raw floor": (["INSERT", "UPDATE"], floor["claim_and_release"], floor["cpu"], 1.0),
        "JobRun.objects.claim() + release()": (
            claim["sequence"],
            claim["claim_and_release"],
            claim["cpu"],
            claim["ratio_to_floor"],
        ),
    }
    for name, path in results["paths"].items():
        rows[name] = (
            path["statements"],
            path["claim_and_release"],
            path["cpu"],
            path["ratio_to_floor"],
        )
    lines = [
        "   every public way in, claim + release of a new window, in the same rounds:",
        f"   {'':<{_NAME}}{'statements':<{_VERBS}}{'median us':>10}{'x floor':>9}{'CPU us':>9}",
    ]
    for name, (statements, cycle, cpu, ratio) in rows.items():
        lines.append(_way(name, statements, cycle, cpu, ratio))
    return lines + _hosts(results.get("hosts", {}))


def _hosts(hosts: dict[str, Any]) -> list[str]:
    """The frameworks' own calls, and the ways in made in them less those."""
    if not hosts:
        return []
    lines = ["   the framework call a way in is made in, alone, in the same rounds:"]
    for name, host in hosts.items():
        lines.append(_way(name, [], host["claim_and_release"], host["cpu"], host["ratio_to_floor"]))
    lines += [
        f"     {host['path']} less {name}: {host['path_less_host_to_floor']:.2f}x the floor"
        for name, host in hosts.items()
    ]
    lines += [
        f"     not held to the targets: {name} (a command's process parses its options once; "
        "call_command parses them on every call)"
        for name in NOT_TARGETED
    ]
    return lines


def _way(
    name: str, statements: list[str], cycle: dict[str, Any], cpu: dict[str, Any], ratio: float
) -> str:
    """One way in, or one peer: what it sends, its median, ratio and CPU."""
    return (
        f"   {name:<{_NAME}}{' '.join(statements):<{_VERBS}}{cycle['median_us']:>10,.0f}"
        f"{ratio:>8.2f}x{cpu['median_us']:>9,.0f}"
    )


def _peers(results: dict[str, Any]) -> list[str]:
    """The peers, in the same rounds; a peer that is not correct says why."""
    lines = ["   peers, each starting one new slot's work once and recording its end:"]
    for name, peer in results["peers"].items():
        lines.append(
            _way(
                name,
                peer["statements"],
                peer["claim_and_release"],
                peer["cpu"],
                peer["ratio_to_floor"],
            )
        )
        if not peer["correct"]:
            lines.append(f"     not a correct peer: {peer['why']}")
    lines += [f"   left out: {name}" for name in results["peers_left_out"]]
    return lines


def _contention(results: dict[str, Any]) -> list[str]:
    lines = [
        "3. Contention: K processes claim one window at the same instant",
        f"   {'K':>3}  {'rounds':>6}  winners per round",
    ]
    for race in results["contention"]:
        winners = Counter(race["winners_per_round"])
        counts = ", ".join(f"{count} rounds: {number}" for number, count in sorted(winners.items()))
        lines.append(f"   {race['processes']:>3}  {race['rounds']:>6}  {counts}")
    lines.append("   losers' statements (how many losers sent them):")
    for race in results["contention"]:
        paths = "; ".join(f"{path}: {count}" for path, count in race["loser_statements"].items())
        lines.append(f"     K={race['processes']}: {paths}")
    lines.append(
        "   losers' statements by what each was for (count, median us), less CPU queueing"
        " where measured:"
    )
    roles = results["contention"][0]["statement_times"]
    lines.append(f"     {'K':>3}  " + "".join(f"{role:<20}" for role in roles))
    for race in results["contention"]:
        times = race["statement_times"].values()
        cells = [time["excluding_queue"] or time["wall"] for time in times]
        lines.append(
            f"     {race['processes']:>3}  " + "".join(f"{_brief(cell):<20}" for cell in cells)
        )
    lines.append(
        "   claim INSERT: refused by the winner's row, committed or not; read: the rows in the"
        " loser's way; skip INSERT: the record of its skip"
    )
    lines.append(
        "   less CPU queueing: each statement less the time its client and server threads"
        " waited for a CPU (/proc schedstat)"
    )
    return lines


def _brief(samples: dict[str, Any] | None) -> str:
    if samples is None:
        return "none"
    return f"{samples['samples']}, {samples['median_us']:,.0f}"


def _history(history: dict[str, Any]) -> list[str]:
    rows = history["rows"]
    return [
        f"4. History: claim() + release() beside {rows:,} finished claims"
        f" (written in {history['fill_seconds']} s)",
        _row("at 0 rows", history["empty"]),
        _row(f"at {rows:,} rows", history["full"]),
        _row("raw floor, during the 0-row phase", history["floor_empty"]),
        _row(f"raw floor, during the {rows:,}-row phase", history["floor_full"]),
        f"   medians: {history['raw_ratio']}x, while the floor moved {history['floor_drift']}x",
        f"   claim + release / raw floor, round by round: {history['ratio_to_floor_empty']}x at 0"
        f" rows, {history['ratio_to_floor_full']}x at {rows:,}: ratio {history['ratio']}x",
        "   plan of the read a refused claim sends:",
        *(f"     {line}" for line in history["plan"]["plan"]),
    ]


def _prune(prune: dict[str, Any]) -> list[str]:
    ending = (
        "finished"
        if prune["finished"]
        else f"STOPPED at its budget of {prune['budget_seconds']:g} s"
    )
    longest = ", ".join(f"{verb} {ms:,} ms" for verb, ms in prune["longest_ms"].items())
    median = ", ".join(f"{verb} {ms:,} ms" for verb, ms in prune["median_ms"].items())
    counts = ", ".join(f"{verb} {count}" for verb, count in prune["statements"].items())
    return [
        f"5. Prune: {prune['deleted']:,} rows deleted in {prune['seconds']} s "
        f"({ending}): {prune['rows_per_second']:,} rows/s",
        f"   statements: {counts}",
        f"   longest: {longest}",
        f"   median: {median}",
    ]


def _throughput(throughput: dict[str, Any]) -> list[str]:
    stopped = (
        ""
        if throughput["claimed"] == throughput["jobs"]
        else f" (stopped at the time budget, of {throughput['jobs']:,})"
    )
    return [
        f"6. Throughput: {throughput['claimed']:,} distinct jobs{stopped} claimed and "
        f"released by {throughput['processes']} processes in {throughput['seconds']} s: "
        f"{throughput['claims_per_second']:,} claims/s",
    ]


def _targets(targets: list[dict[str, Any]]) -> list[str]:
    width = max(len(target["target"]) for target in targets)
    lines = ["", f"{'Targets':<{width + 3}}{'figure':>12}  {'target':<11}met"]
    for target in targets:
        met = {True: "yes", False: "MISSED", None: "(not judged here)"}[target["met"]]
        figure = "unavailable" if target["figure"] is None else target["figure"]
        lines.append(f"   {target['target']:<{width}}{figure:>12}  {target['wanted']:<11}{met}")
    return lines
