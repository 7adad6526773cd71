"""200 trials of 8 instances released together: each has exactly one outcome."""

from __future__ import annotations

import datetime
from collections import Counter

import pytest
from django.db import connection

from tests.support.racers import Racers
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

TRIALS = 200
INSTANCES = 8


def test_every_trial_of_eight_simultaneous_instances_has_exactly_one_outcome(capsys):
    racers = Racers(INSTANCES)
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    single = 0
    try:
        for trial in range(TRIALS):
            window = (start + datetime.timedelta(hours=trial)).isoformat()
            results = racers.race("charge_ledger", "--window", window)
            if Counter(r.outcome for r in results) == {"ran": 1, "skipped": INSTANCES - 1}:
                single += 1
    finally:
        racers.close()
    charges = Counter(Charge.objects.values_list("window", flat=True))
    with capsys.disabled():
        print(
            f"\n[{connection.vendor}] {TRIALS} trials of {INSTANCES} instances: "
            f"{single} with exactly one outcome, {len(charges)} windows charged, "
            f"most charges in one window: {max(charges.values())}"
        )
    assert single == TRIALS
    assert len(charges) == TRIALS
    assert set(charges.values()) == {1}
