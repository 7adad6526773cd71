"""What ``make bench`` writes with raw SQL, checked against the real schema.

CI does not run the benchmark, so a column added to the claims table must
not leave its history generator behind (it once did: ``failures``).
"""

from __future__ import annotations

import pytest
from django.db import connection

from benchmarks import history
from jobclaims.models import JobRun

# MariaDB commits at the history's ANALYZE TABLE: a transaction could not
# take its rows back, so the tables are emptied after the test instead.
pytestmark = pytest.mark.django_db(transaction=True)


def test_the_history_generator_writes_finished_claims_the_model_reads():
    history.fill(connection, 200, "bench")
    runs = JobRun.objects.all()
    assert runs.count() == 200
    assert runs.filter(job="bench").count() == 100
    assert set(runs.values_list("status", flat=True)) == {"succeeded", "failed"}
    assert all(run.failures == (run.status == "failed") for run in runs)
    assert not runs.filter(finished_at=None).exists()
