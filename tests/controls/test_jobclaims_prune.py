"""jobclaims_prune: old finished claims and skips deleted, each job's newest kept."""

from __future__ import annotations

import datetime

import pytest

from jobclaims.claims.rule import State
from jobclaims.models import JobRun, JobSkip
from jobclaims.time.clock import database_now
from tests.support.factories import claim_in_state
from tests.support.helpers import run_command

pytestmark = pytest.mark.django_db

DAY = datetime.timedelta(days=1)
LEASE = datetime.timedelta(minutes=5)


@pytest.fixture
def history() -> dict[str, JobRun]:
    """Two jobs' claims: old finished ones, recent ones and running ones."""
    return {
        "old success": claim_in_state(State.SUCCEEDED, window="2026-10-01", age=60 * DAY),
        "old failure": claim_in_state(State.FAILED, window="2026-10-02", age=59 * DAY),
        "recent": claim_in_state(State.SUCCEEDED, window="2026-11-28", age=DAY),
        "old, stuck": claim_in_state(State.EXPIRED, window="2026-10-03", age=58 * DAY),
        "active": claim_in_state(State.ACTIVE, window="2026-11-29"),
        "other job's newest": claim_in_state(
            State.SUCCEEDED, "send_reminders", "2026-10-01", age=45 * DAY
        ),
        "other job's older": claim_in_state(
            State.FAILED, "send_reminders", "2026-09-30", age=46 * DAY
        ),
    }


def kept(history: dict[str, JobRun]) -> set[str]:
    remaining = set(JobRun.objects.values_list("pk", flat=True))
    return {name for name, run in history.items() if run.pk in remaining}


def skip(window: str, age: datetime.timedelta) -> JobSkip:
    return JobSkip.objects.create(
        job="charge_invoices",
        window=window,
        owner="web-2:77:feedf00d",
        reason=JobSkip.Reason.SUCCEEDED,
        skipped_at=database_now() - age,
    )


def test_prune_deletes_old_finished_claims_and_old_skips_and_says_how_many(history):
    skip("2026-10-01", 40 * DAY), skip("2026-10-02", 31 * DAY)
    recent = skip("2026-11-28", DAY)
    out, _, status = run_command("jobclaims_prune", "--older-than", "30d")
    assert (out, status) == ("Deleted 3 finished claims and 2 skips.\n", 0)
    assert kept(history) == {"recent", "old, stuck", "active", "other job's newest"}
    assert list(JobSkip.objects.all()) == [recent]


def test_prune_keeps_each_jobs_newest_finished_claim_however_old(history):
    run_command("jobclaims_prune", "--older-than", "1m")
    assert kept(history) == {"recent", "old, stuck", "active", "other job's newest"}
    assert JobRun.objects.claim("send_reminders", "2026-10-01", lease=LEASE) is None


def test_prune_never_deletes_a_running_claim_however_old():
    stuck = claim_in_state(State.EXPIRED, window="2026-08-01", age=120 * DAY)
    held = claim_in_state(State.ACTIVE, window="2026-08-02", age=119 * DAY)
    claim_in_state(State.SUCCEEDED, window="2026-11-28", age=DAY)
    run_command("jobclaims_prune", "--older-than", "1m")
    assert set(JobRun.objects.running()) == {stuck, held}


def test_prune_dry_run_counts_and_deletes_nothing(history):
    skip("2026-10-01", 40 * DAY)
    out, _, status = run_command("jobclaims_prune", "--older-than", "30d", "--dry-run")
    assert (out, status) == ("Would delete 3 finished claims and 1 skip.\n", 0)
    assert kept(history) == set(history)
    assert JobSkip.objects.count() == 1


def test_prune_keeps_claims_that_finished_more_recently_than_the_age(history):
    run_command("jobclaims_prune", "--older-than", "50d")
    assert "other job's older" in kept(history)
    assert "old success" not in kept(history)


@pytest.mark.parametrize("age", ["30", "30x", "0d", "-5d", "1.5h", "d"])
def test_prune_refuses_an_age_it_cannot_read_and_deletes_nothing(history, age):
    _, err, status = run_command("jobclaims_prune", f"--older-than={age}")
    assert status == 1
    assert "like 30d, 12h or 90m" in err
    assert kept(history) == set(history)


def test_prune_without_an_age_prunes_to_the_bounds_the_schedulers_keep(history, settings):
    settings.JOBCLAIMS = {"HISTORY_MAX_AGE": 50 * DAY, "HISTORY_MAX_ROWS_PER_JOB": None}
    skip("2026-10-01", 51 * DAY)
    out, err, status = run_command("jobclaims_prune")
    assert status == 0, err
    assert out.startswith("Deleted 2 finished runs and 1 skip in ")
    gone = {"old success", "old failure"}
    assert kept(history) == set(history) - gone


def test_prune_without_an_age_or_bounds_names_the_fix(history, settings):
    settings.JOBCLAIMS = {"HISTORY_MAX_AGE": None, "HISTORY_MAX_ROWS_PER_JOB": None}
    _, err, status = run_command("jobclaims_prune")
    assert status == 1
    assert "The settings keep history forever (JOBCLAIMS['HISTORY_MAX_AGE'] and" in err
    _, err, status = run_command("jobclaims_prune", "--dry-run")
    assert status == 1
    assert "--dry-run counts what --older-than AGE would delete: pass one" in err
    assert kept(history) == set(history)


@pytest.mark.parametrize("age", ["999999999d", "99999999999999h", "36526d"])
def test_prune_refuses_an_age_longer_than_a_century_and_deletes_nothing(history, age):
    skip("2026-10-01", 40 * DAY)
    _, err, status = run_command("jobclaims_prune", "--older-than", age)
    assert status == 1
    assert f"argument --older-than: '{age}' is longer than the 36525 days (100 years)" in err
    assert kept(history) == set(history)
    assert JobSkip.objects.count() == 1


def test_prune_accepts_an_age_of_a_century(history):
    _, err, status = run_command("jobclaims_prune", "--older-than", "36525d")
    assert status == 0, err
    assert kept(history) == set(history)
