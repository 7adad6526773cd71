"""The test kit users prove their own jobs with: it must catch a broken job."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobclaims.models import JobRun
from jobclaims.testing import RaceTestCase, assert_ran_once, race
from tests.testapp.models import Charge


def test_the_kit_catches_a_job_that_charges_twice(race_command):
    results = race_command("unprotected_charge", "--together", "2", instances=2)
    assert [result.outcome for result in results] == ["ran", "ran"]
    assert Charge.objects.filter(job="unprotected").count() == 2
    with pytest.raises(AssertionError, match="2 of 2 instances ran; expected exactly 1"):
        assert_ran_once(results)


def test_the_kit_passes_a_protected_job(race_command):
    results = race_command("charge_ledger", "--window", "2026-11-29T10:00", instances=2)
    assert_ran_once(results)
    assert Charge.objects.count() == 1


def test_a_failed_instance_is_not_one_outcome(race_command):
    results = race_command("charge_ledger", "--window", "2026-11-29T10:00", "--fail", instances=2)
    with pytest.raises(AssertionError, match=r"instance \d failed \(exit 1\)"):
        assert_ran_once(results)


def test_each_result_carries_exit_status_and_output(race_command):
    ran, skipped = sorted(
        race_command("charge_ledger", "--window", "2026-11-29T10:00", "--hold", "0.3"),
        key=lambda result: result.outcome,
    )
    assert (ran.outcome, ran.returncode) == ("ran", 0)
    assert "Ran charge_ledger" in ran.stdout
    assert (skipped.outcome, skipped.returncode) == ("skipped", 0)
    assert skipped.stdout.startswith("Skipped charge_ledger")


def test_a_skip_is_told_at_verbosity_0_where_the_command_prints_nothing(race_command):
    results = race_command(
        "charge_ledger", "--window", "2026-11-29T10:00", "--hold", "0.3", "-v", "0"
    )
    assert sorted(result.outcome for result in results) == ["ran", "skipped"]
    assert all(result.stdout.startswith("charging") or not result.stdout for result in results)
    assert_ran_once(results)


def test_a_job_that_prints_before_it_claims_is_judged_by_its_claim(race_command):
    results = race_command(
        "charge_ledger", "--window", "2026-11-29T10:00", "--hold", "0.3", "--say", "Skipped nothing"
    )
    assert sorted(result.outcome for result in results) == ["ran", "skipped"]
    assert all(result.stdout.startswith("Skipped nothing") for result in results)


@pytest.mark.django_db
def test_an_in_memory_sqlite_database_is_refused_with_the_fix():
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("only SQLite has in-memory databases")
    original = connection.settings_dict["NAME"]
    connection.settings_dict["NAME"] = ":memory:"
    try:
        with pytest.raises(ImproperlyConfigured, match=r"in-memory SQLite database.*TEST"):
            race("charge_ledger")
    finally:
        connection.settings_dict["NAME"] = original


class RaceTestCaseTests(RaceTestCase):
    def test_a_transaction_test_case_races_two_instances(self):
        results = self.race("charge_ledger", "--window", "2026-11-29T10:00")
        self.assertRanOnce(results)
        assert JobRun.objects.get().status == "succeeded"
