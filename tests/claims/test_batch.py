"""The claims of many fires at one instant, in a few statements for all
(``jobclaims.claims.batch``), against the real databases: one winner per
fire however many hosts race, a loser told why in two statements, and every
fire the batch cannot settle left to the single claim's whole rule."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import pytest
from django.db import connection, connections
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from jobclaims.claims.batch import Fire
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.controls import pauses
from jobclaims.models import JobRun, JobSkip
from jobclaims.running.children import child_environment

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = datetime.timedelta(minutes=5)

#: Messages a host sends for one batch that it wins whole, and for one it
#: loses whole (``jobclaims.claims.batch``): MariaDB reads what refuses the
#: claims before its insert, then sends the insert, the skips and the read
#: after its commit in one.
WON_IN = {"postgresql": 1, "sqlite": 1, "mysql": 2}
LOST_IN = {"postgresql": 2, "sqlite": 2, "mysql": 2}


def fires(count: int, window: str = "w1") -> list[Fire]:
    return [Fire(f"job_{n:04d}", window, LEASE, series=f"s{n:04d}") for n in range(count)]


def claimed(job: str, window: str, *, allow_overlap: bool = False) -> JobRun:
    run = JobRun.objects.claim(job, window, lease=LEASE, allow_overlap=allow_overlap)
    assert run is not None
    return run


def told(outcome: JobRun | Refusal | None) -> str | None:
    """What a batch said of a fire: its run's status, its refusal's reason, or None."""
    if outcome is None:
        return None
    return outcome.reason if isinstance(outcome, Refusal) else outcome.status


def test_one_host_wins_a_thousand_free_fires_at_once_and_another_loses_each_told_why():
    wanted = fires(1000)
    with CaptureQueriesContext(connection) as winning:
        won = JobRun.objects.try_claim_many(wanted, owner="host-a")
    with CaptureQueriesContext(connection) as losing:
        lost = JobRun.objects.try_claim_many(wanted, owner="host-b")

    assert {told(run) for run in won} == {"running"}
    assert {run.job for run in won if isinstance(run, JobRun)} == {f.job for f in wanted}
    assert {told(refusal) for refusal in lost} == {Reason.HELD}
    assert JobRun.objects.filter(owner="host-a", status="running").count() == 1000
    assert not JobRun.objects.exclude(owner="host-a").exists()
    # Each run holds its lease by the database clock, as a single claim's does.
    run = JobRun.objects.get(job="job_0007")
    assert run.expires_at - run.claimed_at == LEASE
    skips = JobSkip.objects.filter(reason="held", owner="host-b")
    assert (skips.count(), {skip.count for skip in skips}) == (1000, {1})
    assert len(winning.captured_queries) == WON_IN[connection.vendor]
    assert len(losing.captured_queries) == LOST_IN[connection.vendor]


def test_each_fire_the_batch_cannot_settle_is_left_to_the_single_claim_and_nothing_is_written():
    for job in ("paused", "dead", "failed", "held", "done"):
        claimed(job, "before", allow_overlap=True).release()
    pauses.pause("paused", by="ops")
    claimed("dead", "now")
    # Its holder died: its lease ended.
    JobRun.objects.filter(job="dead", window="now").update(expires_at=F("claimed_at"))
    claimed("failed", "now").release(JobRun.Status.FAILED, error="boom")
    claimed("held", "earlier")
    claimed("done", "now").release()
    names = ["paused", "dead", "failed", "held", "done", "fresh"]
    before = {(run.job, run.window, run.token) for run in JobRun.objects.all()}

    outcomes = JobRun.objects.try_claim_many([Fire(name, "now", LEASE) for name in names])

    assert dict(zip(names, map(told, outcomes), strict=True)) == {
        "paused": None,
        "dead": None,
        "failed": None,
        "held": Reason.OVERLAP,
        "done": Reason.SUCCEEDED,
        "fresh": "running",
    }
    after = {(run.job, run.window, run.token) for run in JobRun.objects.exclude(job="fresh")}
    assert after == before  # The batch took nothing over, and wrote no paused job's row.

    # Alone, as the scheduler claims them next, each by the whole rule.
    def alone(job: str) -> str | None:
        return told(JobRun.objects.try_claim(job, "now", lease=LEASE, take_failed=False))

    assert (alone("paused"), alone("dead"), alone("failed")) == (
        Reason.PAUSED,
        "running",
        Reason.FAILED,
    )
    assert JobRun.objects.get(job="dead", window="now").attempt == 2  # Taken over.


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite locks the whole file: the insert would wait too"
)
def test_a_skip_count_that_fails_once_the_claims_committed_keeps_every_fire_won():
    held, free = fires(5), [Fire(f"free_{n}", "w1", LEASE) for n in range(5)]
    JobRun.objects.try_claim_many(held, owner="host-a")
    JobRun.objects.try_claim_many(held, owner="host-b")  # Its skips' rows now exist.
    other = connections.create_connection("default")
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:  # Another session writes a skip's row, and waits.
            cursor.execute(
                f"UPDATE {JobSkip._meta.db_table} SET count = count WHERE job = %s", ["job_0003"]
            )
        with connection.cursor() as cursor:
            cursor.execute(
                "SET SESSION innodb_lock_wait_timeout = 1"
                if connection.vendor == "mysql"
                else "SET lock_timeout = '200ms'"
            )
        outcomes = JobRun.objects.try_claim_many([*held, *free], owner="host-b")
    finally:
        other.rollback()
        other.close()

    assert [told(outcome) for outcome in outcomes] == [None] * 5 + ["running"] * 5
    won = JobRun.objects.filter(owner="host-b", status="running")
    assert sorted(won.values_list("job", flat=True)) == [fire.job for fire in free]
    assert JobSkip.objects.get(job="job_0003", owner="host-b").count == 1  # Not counted again.


@pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="Row locks: a fire whose row another transaction holds is claimed alone",
)
def test_a_batch_that_waits_out_the_busy_timeout_tries_again_rather_than_claim_fire_by_fire(
    sqlite_locked_past_the_busy_timeout,
):
    with CaptureQueriesContext(connection) as sent:
        outcomes = JobRun.objects.try_claim_many(fires(50), owner="host-a")

    assert {told(outcome) for outcome in outcomes} == {"running"}
    # Tried whole until the lock was free, never fire by fire: each
    # statement sent was the batch's one insert of all fifty.
    tries = [query["sql"] for query in sent.captured_queries]
    assert len(tries) > 1
    assert len(set(tries)) == 1
    assert JobRun.objects.filter(owner="host-a", status="running").count() == 50


@pytest.fixture
def one_statement_a_message():
    """The test database's connection, opened again as a project's that sets
    mysqlclient's ``"multi_statements": False`` in its ``OPTIONS``."""
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    options["multi_statements"] = False
    yield
    connection.close()
    del options["multi_statements"]


@pytest.mark.skipif(
    connection.vendor != "mysql", reason="mysqlclient's option: other drivers have none"
)
def test_a_connection_that_sends_one_statement_a_message_claims_with_one_each(
    one_statement_a_message,
):
    with CaptureQueriesContext(connection) as sent:
        run = claimed("alone", "w1")
        run.release()
        won = JobRun.objects.try_claim_many(fires(10), owner="host-a")
        lost = JobRun.objects.try_claim_many(fires(10), owner="host-b")
        # A claim of a slot reads what refuses it in one statement, too.
        hour = JobRun.objects.claim(
            "slotted", "2026-12-01T20:00:00+00:00", lease=LEASE, schedule="hourly"
        )
        assert hour is not None
        hour.release()
        respelled = JobRun.objects.try_claim(
            "slotted", "2026-12-01T20:00+00:00", lease=LEASE, schedule="hourly"
        )

    assert JobRun.objects.get(job="alone").status == JobRun.Status.SUCCEEDED
    assert told(respelled) == Reason.SLOT_RAN
    assert {told(outcome) for outcome in won} == {"running"}
    assert {told(outcome) for outcome in lost} == {Reason.HELD}
    assert not [query["sql"] for query in sent.captured_queries if ";\n" in query["sql"]]


def test_a_batch_with_one_bad_fire_writes_nothing_and_names_the_fix():
    bad = Fire("x" * 300, "w1", LEASE)
    with pytest.raises(ValueError, match="200"):
        JobRun.objects.try_claim_many([*fires(5), bad])
    assert not JobRun.objects.exists()


class BatchClaimers:
    """``count`` warm processes (``tests.support.batch_claimers``) that each
    claim the same fires at one instant, released together by one write."""

    def __init__(self, count: int, fires: int):
        self.read, self.write = os.pipe()
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.support.batch_claimers", str(fires)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                pass_fds=[self.read],
                env={**os.environ, **child_environment(), "BATCH_TRIGGER_FD": str(self.read)},
            )
            for _ in range(count)
        ]

    def race(self) -> list[dict[str, object]]:
        for process in self.processes:
            assert process.stdout is not None
            assert process.stdout.readline() == "ready\n"
        os.write(self.write, b"x" * len(self.processes))
        said = [process.communicate(timeout=240) for process in self.processes]
        failed = [
            err
            for (_, err), process in zip(said, self.processes, strict=True)
            if process.returncode
        ]
        assert not failed, failed[0]
        return [json.loads(out) for out, _ in said]

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
        os.close(self.read)
        os.close(self.write)


@pytest.mark.xdist_group("fleets")  # 32 processes at once: beside no timed fleet.
@pytest.mark.parametrize("hosts", [2, 8, 32])
def test_hosts_racing_a_thousand_fires_in_batches_give_each_fire_exactly_one_winner(hosts):
    claimers = BatchClaimers(hosts, fires=1000)
    try:
        said = claimers.race()
    finally:
        claimers.close()
    winners = [job for host in said for job in host["won"]]  # type: ignore[attr-defined]
    assert len(winners) == 1000
    assert set(winners) == {f"batch_{n:04d}" for n in range(1000)}
    assert JobRun.objects.filter(window="TODAY", status="running").count() == 1000
    assert JobRun.objects.count() == 1000
    # Every host claimed in a batch: a few statements each, not one per fire.
    assert max(int(host["batch_statements"]) for host in said) <= 4  # type: ignore[call-overload]
