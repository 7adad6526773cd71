"""Claims under the stricter isolation a project may choose.

Django reads committed data by default; a project may set REPEATABLE READ or
SERIALIZABLE (``DATABASES[...]["OPTIONS"]["isolation_level"]``), or on
SQLite transactions that take the write lock as they begin
(``"transaction_mode"``). There the database ends more transactions with a
serialization failure; every one must end as a clean skip or a retry.
Real processes, each configured as such a project would be.
"""

from __future__ import annotations

import datetime
from collections import Counter

import pytest
from django.db import connection

from jobclaims.claims.rule import State
from jobclaims.models import JobRun
from jobclaims.testing import race
from tests.support.factories import claim_in_state
from tests.support.racers import Racers
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
ROUNDS = 10

#: What each database calls its stricter settings.
STRICTER = {
    "postgresql": ["repeatable read", "serializable"],
    "mysql": ["repeatable read", "serializable"],
    "sqlite": ["immediate", "exclusive"],
}


@pytest.fixture(params=[0, 1], ids=["stricter", "strictest"])
def isolation(request) -> dict[str, str]:
    """The environment that puts the racing processes under it."""
    return {"TESTS_ISOLATION_LEVEL": STRICTER[connection.vendor][request.param]}


def hour(number: int) -> str:
    return (START + datetime.timedelta(hours=number)).isoformat(timespec="minutes")


@pytest.mark.parametrize("state", [State.FAILED, State.EXPIRED])
def test_contenders_for_a_window_to_take_over_run_it_once(isolation, state):
    racers = Racers(3, env=isolation)
    try:
        rounds = []
        for number in range(ROUNDS):
            claim_in_state(state, job="charge_ledger", window=hour(number))
            rounds.append(racers.race("charge_ledger", "--window", hour(number)))
    finally:
        racers.close()
    failures = [result.stderr for results in rounds for result in results if result.returncode]
    assert not failures, failures[0]
    for results in rounds:
        assert Counter(result.outcome for result in results) == {"ran": 1, "skipped": 2}
    assert Counter(Charge.objects.values_list("window", flat=True)) == {
        run.window: 1 for run in JobRun.objects.all()
    }
    assert set(JobRun.objects.values_list("status", "attempt")) == {("succeeded", 2)}


def test_fenced_steps_commit_while_the_heartbeat_renews_the_lease(isolation):
    steps = 40
    # A 0.3 s lease is renewed every 0.1 s, between and during the steps.
    [result] = race(
        "charge_steps",
        *("--window", hour(0), "--lease", "0.3", "--steps", str(steps), "--pause", "0.01"),
        instances=1,
        env=isolation,
    )
    assert result.returncode == 0, result.stderr
    assert Charge.objects.count() == steps
    assert JobRun.objects.get().status == JobRun.Status.SUCCEEDED
