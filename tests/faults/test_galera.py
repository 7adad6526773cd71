"""Claims on a three-node MariaDB Galera cluster, one instance per node.

Galera lets every node take writes and settles conflicts when a transaction
commits: row locks are local to a node, and a write set that touches a key
another node changed first fails certification. These tests race real
processes of the test job, each connected to a different node, and count
what a user would see: how many instances ran each window, and whether any
exited non-zero.

They need the cluster that scripts/start-galera starts, and the suite's own
database on it: ``DATABASE_URL`` set to the first node and
``JOBCLAIMS_GALERA_URLS`` to all three (``.ci/run`` does both). Every trial
is counted and the counts printed, so a failure shows how often, not just
that.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from django.db import connection

from jobclaims.models import JobRun
from jobclaims.testing import Instance, InstanceResult, StartingLine
from tests.support.helpers import cluster_setting, wait_until
from tests.support.racers import Racers
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

#: The test job, allowed to hold many windows at once: the holders of a batch
#: of windows are started, and killed, together.
OVERLAPPING = "charge_overlapping"
HOW = "start the cluster with scripts/start-galera and set it to the URLs that prints"


@pytest.fixture
def node_urls() -> list[str]:
    """The nodes' URLs, with this process's test database on the first node."""
    urls = cluster_setting("JOBCLAIMS_GALERA_URLS", HOW).split(",")
    if connection.vendor != "mysql" or not _wsrep_on():
        pytest.skip(
            "the suite's database is not on the Galera cluster: run these tests "
            f"with DATABASE_URL={urls[0]}"
        )
    with connection.cursor() as cursor:
        # This process checks what the instances did, on whichever node
        # they did it: its reads wait until the node has caught up.
        cursor.execute("SET SESSION wsrep_sync_wait = 1")
    return urls


def _wsrep_on() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SHOW GLOBAL VARIABLES LIKE 'wsrep\\_on'")
        row = cursor.fetchone()
    return row is not None and row[1] == "ON"


def on_nodes(urls: list[str]) -> list[dict[str, str]]:
    """One environment per node, for processes of the test job."""
    return [{"DATABASE_URL": url} for url in urls]


@pytest.fixture
def tally(request, capsys) -> Iterator[Counter]:
    """Counts of what the trials did, printed at the end whatever happens."""
    counts: Counter = Counter()
    yield counts
    with capsys.disabled():
        print(f"\n[galera] {request.node.name}: {dict(sorted(counts.items()))}")


def judge(results: list[InstanceResult], tally: Counter) -> None:
    """Count one trial: how many instances ran the job, and how many failed.

    An instance that ran the job and then found its claim taken over exits
    1, yet it ran: the job's own output tells.
    """
    ran = sum("charging as attempt" in result.stdout for result in results)
    tally["trials"] += 1
    tally[f"ran {ran}"] += 1
    if any(result.returncode != 0 for result in results):
        tally[f"exited non-zero: {_failure(results)}"] += 1


def _failure(results: list[InstanceResult]) -> str:
    failed = next(result for result in results if result.returncode != 0)
    return (failed.stderr.strip().splitlines() or ["(no output)"])[-1][:300]


def windows(count: int, offset: int = 0) -> list[str]:
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    hours = (start + datetime.timedelta(hours=offset + n) for n in range(count))
    # The hourly test job's own keys, which its claims and charges carry.
    return [f"{hour:%Y-%m-%dT%H:%M}+00:00" for hour in hours]


def race_windows(urls: list[str], trials: int, tally: Counter) -> None:
    racers = Racers(envs=on_nodes(urls))
    try:
        for window in windows(trials):
            judge(racers.race("charge_ledger", "--window", window), tally)
    finally:
        racers.close()


def test_two_instances_on_two_nodes_run_each_window_once_in_200_races(node_urls, tally):
    race_windows(node_urls[:2], 200, tally)
    assert tally == {"trials": 200, "ran 1": 200}
    assert set(Counter(Charge.objects.values_list("window", flat=True)).values()) == {1}


def test_three_instances_on_three_nodes_run_each_window_once_in_50_races(node_urls, tally):
    race_windows(node_urls, 50, tally)
    assert tally == {"trials": 50, "ran 1": 50}
    assert set(Counter(Charge.objects.values_list("window", flat=True)).values()) == {1}


def test_a_killed_holders_window_is_taken_over_once_across_nodes_in_50_races(node_urls, tally):
    racers = Racers(envs=on_nodes(node_urls))
    try:
        for batch in range(5):
            batch_windows = windows(10, offset=10 * batch)
            kill_holders(node_urls, batch_windows)
            for window in batch_windows:
                judge(racers.race(OVERLAPPING, "--window", window), tally)
    finally:
        racers.close()
    assert tally == {"trials": 50, "ran 1": 50}
    # The killed holder charged once, and one successor once.
    assert set(Counter(Charge.objects.values_list("window", flat=True)).values()) == {2}
    assert set(JobRun.objects.values_list("attempt", flat=True)) == {2}


def kill_holders(urls: list[str], held: list[str]) -> None:
    """Claim each window from a process on some node, SIGKILL them all, and
    wait for their leases to end, by the database clock."""
    line = StartingLine()
    holders = [
        Instance(
            OVERLAPPING,
            *("--window", window, "--lease", "1", "--hold", "60"),
            line=line,
            env=on_nodes(urls)[n % len(urls)],
        )
        for n, window in enumerate(held)
    ]
    try:
        for holder in holders:
            holder.wait_ready()
        line.release()
        wait_until(
            lambda: Charge.objects.filter(window__in=held).count() == len(held),
            "the holders to charge",
            timeout=60,
        )
    finally:
        for holder in holders:
            os.kill(holder.process.pid, signal.SIGKILL)
            holder.stop()
    wait_until(
        lambda: JobRun.objects.expired().filter(window__in=held).count() == len(held),
        "the killed holders' leases to run out",
        timeout=60,
    )


def test_an_instance_on_a_node_cut_off_from_the_cluster_does_not_run_and_says_why(node_urls):
    """Galera answers 1047 on a node outside the primary component; a claim
    retries it like any "try again", then gives up having run nothing."""
    isolated = on_nodes(node_urls)[2]
    try:
        isolate(node_urls[2], True)
        wait_until(lambda: not in_primary_component(node_urls[2]), "the node to leave", timeout=60)
        [result] = race_on(isolated)
    finally:
        isolate(node_urls[2], False)
        wait_until(lambda: synced(node_urls[2]), "the node to rejoin", timeout=60)
    assert result.returncode == 1, result
    assert "Could not claim charge_ledger" in result.stderr
    assert "nothing ran" in result.stderr
    assert not Charge.objects.exists()


def race_on(env: dict[str, str]) -> list[InstanceResult]:
    from jobclaims.testing import race

    return race("charge_ledger", "--window", windows(1)[0], instances=1, env=env, timeout=120)


def on_node(url: str, statement: str) -> str:
    """Run ``statement`` on the node at ``url`` with the mariadb client, as an operator would."""
    parts = urlsplit(url)
    client = ["mariadb", "--protocol=tcp", f"--host={parts.hostname}", f"--port={parts.port}"]
    client += [f"--user={parts.username or 'root'}", "--batch", "--skip-column-names"]
    done = subprocess.run([*client, "-e", statement], capture_output=True, text=True, check=True)
    return done.stdout


def node_status(url: str, name: str) -> str:
    """A ``wsrep_`` status of the node at ``url``."""
    row = on_node(url, f"SHOW STATUS LIKE '{name}'").split()
    return row[1] if len(row) > 1 else ""


def in_primary_component(url: str) -> bool:
    return node_status(url, "wsrep_cluster_status") == "Primary"


def synced(url: str) -> bool:
    return node_status(url, "wsrep_local_state_comment") == "Synced"


def isolate(url: str, cut_off: bool) -> None:
    """Cut the node at ``url`` off from the others, or let it rejoin them."""
    on_node(url, f"SET GLOBAL wsrep_provider_options = 'gmcast.isolate={int(cut_off)}'")
