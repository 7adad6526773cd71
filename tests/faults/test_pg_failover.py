"""Claims across a PostgreSQL failover: what the promoted standby knows.

Each trial starts a fresh primary and standby (scripts/start-pg-replica),
runs an instance of the test job on the primary, stops the primary with
``pg_ctl stop -m immediate`` the moment the instance says it claimed the
window, promotes the standby, and runs a second instance there. A window
must never run twice when the standby acknowledges every commit
(``synchronous_commit`` ``on`` or ``remote_apply``), whether it is streaming
or cut off; with asynchronous replication and a standby that lags, the
promoted server never saw the claim, and the second run is counted and
reported: it is the known limit (docs/clusters.md).

They need ``JOBCLAIMS_PG_REPLICA`` set to the primary's and the standby's
URLs (scripts/start-pg-replica prints it), and ``DATABASE_URL`` set to the
primary, so that they run once, not in each of the suite's runs on its
databases (scripts/test-clusters sets both). They reset the pair for each
trial, and use no test database of the suite's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import connection

from tests.support.helpers import cluster_setting

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "start-pg-replica"
HOW = "start the pair with scripts/start-pg-replica and set it to the URLs that prints"
TRIALS = 5
#: Seconds the job processes wait for a standby that does not answer.
STANDBY_TIMEOUT = "2"
#: Seconds after which a job that has not said whether it claimed is hung:
#: its wait for the standby, and its start on a loaded machine, many times over.
HUNG_AFTER = 60
WINDOW = "2026-11-29T10:00"


class Pair:
    """The primary and standby that scripts/start-pg-replica runs."""

    def __init__(self, primary: str, standby: str):
        self.primary, self.standby = primary, standby
        self._env = {**os.environ, "PG_REPLICA_PORT": str(urlsplit(primary).port)}

    def do(self, *command: str) -> None:
        subprocess.run([str(SCRIPT), *command], env=self._env, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    """A pair whose snapshot holds the migrated schema, so each reset has it."""
    primary, standby = cluster_setting("JOBCLAIMS_PG_REPLICA", HOW).split(",")
    suite = connection.settings_dict
    if (suite["HOST"], str(suite["PORT"])) != (
        urlsplit(primary).hostname,
        str(urlsplit(primary).port),
    ):
        # Once per run, not in each of the suite's runs on its databases.
        pytest.skip(f"runs with DATABASE_URL={primary} (scripts/test-clusters does)")
    pair = Pair(primary, standby)
    pair.do("reset", "on")
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
        env=job_environment(primary),
        check=True,
    )
    pair.do("snapshot")
    yield pair
    pair.do("reset", "on")


def job_environment(url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),
        # The instance's lines arrive as it prints them.
        "PYTHONUNBUFFERED": "1",
        "TESTS_STANDBY_TIMEOUT": STANDBY_TIMEOUT,
    }


def job(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "django", "charge_ledger", "--window", WINDOW, *args],
        env=job_environment(url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def failover(pair: Pair, mode: str, standby_cut_off: bool) -> tuple[int, str]:
    """One trial: how many instances ran the window, and the first one's stderr."""
    pair.do("reset", mode)
    if standby_cut_off:
        pair.do("cut")
    first = job(pair.primary, "--hold", "60")
    assert first.stdout is not None
    # "Claimed …", or nothing if it did not claim. A claim hung on a standby
    # that never answers is killed here, and says no error the test expects.
    watchdog = threading.Timer(HUNG_AFTER, first.kill)
    watchdog.start()
    try:
        line = first.stdout.readline()
    finally:
        watchdog.cancel()
    pair.do("crash-primary")
    pair.do("promote")
    if first.poll() is None:
        first.send_signal(signal.SIGKILL)
    rest, first_stderr = first.communicate(timeout=60)
    first_ran = "charging as attempt" in line + rest or line.startswith("Claimed")
    second = job(pair.standby)
    second_out, second_err = second.communicate(timeout=60)
    assert second.returncode == 0, second_err
    second_ran = "charging as attempt" in second_out
    return first_ran + second_ran, first_stderr


def report(capsys, scenario: str, runs: Counter) -> None:
    with capsys.disabled():
        print(f"\n[postgresql failover] {scenario}: runs per window {dict(sorted(runs.items()))}")


@pytest.mark.parametrize("mode", ["on", "remote_apply"])
def test_with_a_synchronous_streaming_standby_a_failover_never_runs_a_window_twice(
    pair, mode, capsys
):
    runs: Counter = Counter()
    for _ in range(TRIALS):
        ran, _stderr = failover(pair, mode, standby_cut_off=False)
        runs[ran] += 1
    report(capsys, f"synchronous_commit = {mode}, standby streaming", runs)
    assert runs == {1: TRIALS}


@pytest.mark.parametrize("mode", ["on", "remote_apply"])
def test_with_a_synchronous_standby_cut_off_the_claim_ends_in_an_error_and_never_runs_twice(
    pair, mode, capsys
):
    runs: Counter = Counter()
    for _ in range(TRIALS):
        ran, stderr = failover(pair, mode, standby_cut_off=True)
        runs[ran] += 1
        # The instance on the old primary did not hang (``HUNG_AFTER``): its
        # claim ended in this error.
        assert "no standby acknowledged the commit" in stderr, stderr
    report(capsys, f"synchronous_commit = {mode}, standby cut off", runs)
    # It did not run: the promoted standby's instance ran the window, once.
    assert runs == {1: TRIALS}


def test_with_an_asynchronous_lagging_standby_a_failover_runs_the_window_again(pair, capsys):
    runs: Counter = Counter()
    for _ in range(TRIALS):
        ran, _stderr = failover(pair, "async", standby_cut_off=True)
        runs[ran] += 1
    # The known limit, reported rather than asserted away: the promoted
    # standby never received the claim, so its instance ran the window too.
    report(capsys, "asynchronous, standby lagging (cut off)", runs)
    assert sum(runs.values()) == TRIALS


def test_a_cut_standby_rejoins_and_a_promoted_primary_gets_a_standby_again(pair):
    pair.do("reset", "on")
    pair.do("cut")
    pair.do("rejoin")  # Streams again: a claim's commit is acknowledged.
    first = job(pair.primary)
    assert first.communicate(timeout=60)[0].count("charging as attempt") == 1
    pair.do("crash-primary")
    pair.do("promote")
    pair.do("rebuild", "on")
    # The promoted server's data is the primary's again, on the same URL,
    # with a synchronous standby: the window's success stands, and the
    # next window's claim is acknowledged.
    again = job(pair.primary)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert "already succeeded" in out
    other_window = subprocess.run(
        [sys.executable, "-m", "django", "charge_ledger", "--window", "2026-11-29T11:00"],
        env=job_environment(pair.primary),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "charging as attempt 1" in other_window.stdout, other_window.stderr


def test_a_lease_a_standby_may_outwait_is_warned_of(pair):
    pair.do("reset", "on")
    check = [sys.executable, "-m", "django", "check", "--database", "default", "--tag", "jobclaims"]
    # The default lease, 10 minutes, covers a 60 s wait, not a 600 s one;
    # the test job tick's 6 s covers neither.
    for timeout, warned in (("60", False), ("600", True)):
        env = {**job_environment(pair.primary), "TESTS_STANDBY_TIMEOUT": timeout}
        done = subprocess.run(check, env=env, capture_output=True, text=True, timeout=60)
        assert "(jobclaims.W004) tick's lease is 6 s" in done.stderr
        assert ("(jobclaims.W004) JOBCLAIMS['DEFAULT_LEASE'] is 600 s" in done.stderr) is warned
    pair.do("mode", "async")
    env = {**job_environment(pair.primary), "TESTS_STANDBY_TIMEOUT": "600"}
    done = subprocess.run(check, env=env, capture_output=True, text=True, timeout=60)
    assert "jobclaims.W004" not in done.stderr + done.stdout
