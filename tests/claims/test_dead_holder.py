"""Rounds of instances released together after a run of the job crashed.

The 08:00 run was killed and its lease ran out, so its row still holds the
job when cron starts the 09:00 run on several servers at once. Each of them
may clear the dead holder and insert the new window; the database makes
them wait on each other's rows, and may end one of them with a deadlock.
Every round must still end with exactly one run of 09:00, and no instance
may exit non-zero.
"""

from __future__ import annotations

import datetime
import os
import signal
from collections import Counter

import pytest
from django.db import connection

from jobclaims.claims.rule import State
from jobclaims.models import JobRun
from jobclaims.testing import race, start
from tests.support.factories import claim_in_state
from tests.support.helpers import wait_until
from tests.support.racers import Racers
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def hour(number: int) -> str:
    return (START + datetime.timedelta(hours=number)).isoformat(timespec="minutes")


def race_after_dead_holders(rounds: int, instances: int, capsys) -> None:
    """Race ``instances`` per round, each round after a dead holder's row."""
    racers = Racers(instances)
    single, failed = 0, []
    try:
        for number in range(rounds):
            dead, due = hour(2 * number), hour(2 * number + 1)
            # A round that went wrong may have left a holder: let it go, so
            # the rounds stay independent (the count of charges tells).
            JobRun.objects.filter(holds_job=True).update(holds_job=None)
            # The row a killed run leaves once its lease has ended.
            claim_in_state(State.EXPIRED, job="charge_ledger", window=dead, holds_job=True)
            results = racers.race("charge_ledger", "--window", due)
            outcomes = Counter(result.outcome for result in results)
            if outcomes == {"ran": 1, "skipped": instances - 1}:
                single += 1
            failed += [result for result in results if result.returncode != 0]
    finally:
        racers.close()
    charges = Counter(Charge.objects.values_list("window", flat=True))
    with capsys.disabled():
        print(
            f"\n[{connection.vendor}] {rounds} rounds of {instances} instances after a "
            f"dead holder: {single} with exactly one run, {len(failed)} instances "
            f"exited non-zero, {rounds - len(charges)} windows nobody ran"
        )
    assert not failed, failed[0].stderr
    assert single == rounds
    assert len(charges) == rounds
    assert set(charges.values()) == {1}


def test_fifty_rounds_of_two_instances_after_a_dead_holder_each_run_once(capsys):
    race_after_dead_holders(50, 2, capsys)


def test_twenty_rounds_of_four_instances_after_a_dead_holder_each_run_once(capsys):
    race_after_dead_holders(20, 4, capsys)


def test_the_window_after_a_sigkilled_run_runs_once_when_its_lease_has_ended():
    [holder] = start("charge_ledger", "--window", hour(0), "--lease", "1", "--hold", "60")
    wait_until(Charge.objects.exists, "the 00:00 run to start charging")
    os.kill(holder.process.pid, signal.SIGKILL)
    holder.finish()
    wait_until(JobRun.objects.expired().exists, "the killed run's lease to end")

    results = race("charge_ledger", "--window", hour(1), instances=4)

    assert sorted(result.outcome for result in results) == ["ran", "skipped", "skipped", "skipped"]
    assert Charge.objects.filter(window=JobRun.objects.get(status="succeeded").window).count() == 1
