"""jobclaims_expire: an operator ends a dead holder's lease so the next run takes over."""

from __future__ import annotations

import datetime

import pytest

from jobclaims.claims.rule import State
from jobclaims.models import JobRun
from tests.support.factories import claim_in_state
from tests.support.helpers import run_command, states_of

pytestmark = pytest.mark.django_db

LEASE = datetime.timedelta(minutes=5)


def test_expire_ends_the_lease_of_the_jobs_active_claim(one_of_each):
    out, _, status = run_command("jobclaims_expire", "charge_invoices")
    assert status == 0
    assert out == "Expired 1 claim of charge_invoices: its next run takes over.\n"
    assert states_of("charge_invoices")["2026-11-20"] == "expired"
    successor = JobRun.objects.claim("charge_invoices", "2026-11-20", lease=LEASE)
    assert successor is not None
    assert successor.attempt == 2


def test_expire_with_a_window_leaves_the_jobs_other_claims_alone():
    claim_in_state(State.ACTIVE, window="2026-11-28")
    claim_in_state(State.ACTIVE, window="2026-11-29")
    _, _, status = run_command("jobclaims_expire", "charge_invoices", "--window", "2026-11-29")
    assert status == 0
    assert states_of("charge_invoices") == {
        "2026-11-29": "expired",
        "2026-11-28": "active",
    }


def test_expire_of_a_job_that_holds_nothing_says_so_and_changes_nothing():
    done = claim_in_state(State.SUCCEEDED)
    out, _, status = run_command("jobclaims_expire", "charge_invoices")
    assert status == 0
    assert out == "charge_invoices holds no active claim; nothing was expired.\n"
    assert JobRun.objects.get().expires_at == done.expires_at


def test_expire_of_an_unknown_job_is_an_error_that_names_the_known_jobs(one_of_each):
    _, err, status = run_command("jobclaims_expire", "charge_invoice")
    assert status == 1
    assert err == "no claim of job 'charge_invoice' exists; known jobs: charge_invoices"
    assert JobRun.objects.active().count() == 1


def test_expire_of_an_unknown_window_is_an_error_that_names_the_newest(one_of_each):
    _, err, status = run_command("jobclaims_expire", "charge_invoices", "--window", "2026-11-2")
    assert status == 1
    assert err.startswith("job 'charge_invoices' has no claim of window '2026-11-2'; ")
    assert "its newest windows: 2026-11-20, " in err
    assert JobRun.objects.active().count() == 1
