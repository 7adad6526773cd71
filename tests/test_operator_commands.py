"""The operator commands: jobclaims_status, jobclaims_expire, jobclaims_prune."""

from __future__ import annotations

import datetime
import json

import pytest

from jobclaims.claiming import claim
from jobclaims.clock import database_now
from jobclaims.models import JobRun, JobSkip
from jobclaims.states import State
from jobclaims.windows import resolve
from tests.conftest import run_command
from tests.factories import claim_in_state

pytestmark = pytest.mark.django_db

DAY = datetime.timedelta(days=1)
HOUR = datetime.timedelta(hours=1)
LEASE = datetime.timedelta(minutes=5)


def states_of(job: str) -> dict[str, str]:
    out, err, status = run_command("jobclaims_status", "--job", job, "--json")
    assert status == 0, err
    return {claim["window"]: claim["state"] for claim in json.loads(out)["claims"]}


@pytest.fixture
def one_of_each() -> dict[str, JobRun]:
    return {
        state: claim_in_state(state, window=f"2026-11-2{number}")
        for number, state in enumerate(State)
    }


# jobclaims_status


def test_status_lists_each_claim_in_its_state_newest_first(one_of_each):
    out, _, status = run_command("jobclaims_status")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["JOB", "WINDOW", "STATE", "TRY", "SKIPS", "END", "OWNER"]
    states = [line.split()[2] for line in lines[1:5]]
    assert states == ["active", "failed", "succeeded", "expired"]
    assert lines[-1] == "1 active, 1 expired."


def test_status_says_when_leases_end_and_runs_ended(one_of_each):
    out, _, _ = run_command("jobclaims_status")
    rows = {line.split()[2]: line for line in out.splitlines()[1:5]}
    assert " in 9 min " in rows["active"] or " in 10 min " in rows["active"]
    assert " 1 min ago " in rows["expired"]
    assert " now " in rows["succeeded"] or " 1 s ago " in rows["succeeded"]


def test_status_fits_an_80_column_terminal_however_long_the_names():
    claim_in_state(State.ACTIVE, "j" * 200, "w" * 64, owner="h" * 200 + ":1:abcdef01")
    claim_in_state(State.FAILED, "short", "2026-11-29")
    out, _, _ = run_command("jobclaims_status")
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" in out
    assert "short  " in out


@pytest.mark.parametrize("state", list(State))
def test_status_filters_by_state(one_of_each, state):
    out, _, _ = run_command("jobclaims_status", "--state", state.value, "--json")
    claims = json.loads(out)["claims"]
    assert [(claim["window"], claim["state"]) for claim in claims] == [
        (one_of_each[state].window, state.value)
    ]


def test_status_filters_by_job(one_of_each):
    claim_in_state(State.ACTIVE, "send_reminders")
    assert states_of("send_reminders") == {"2026-11-29": "active"}


def test_status_json_carries_every_field_a_script_needs(one_of_each):
    out, _, _ = run_command("jobclaims_status", "--json")
    document = json.loads(out)
    assert datetime.datetime.fromisoformat(document["now"]).utcoffset() == datetime.timedelta(0)
    failed = next(claim for claim in document["claims"] if claim["state"] == "failed")
    assert set(failed) == {
        "job",
        "window",
        "state",
        "owner",
        "attempt",
        "skips",
        "last_skipped_at",
        "claimed_at",
        "expires_at",
        "finished_at",
    }
    assert failed["owner"] == one_of_each[State.FAILED].owner
    assert datetime.datetime.fromisoformat(failed["finished_at"])


def test_status_shows_the_newest_claims_up_to_the_limit_and_says_how_many_exist():
    for day in range(1, 6):
        claim_in_state(State.SUCCEEDED, window=f"2026-11-0{day}", age=(10 - day) * DAY)
    out, _, _ = run_command("jobclaims_status", "--limit", "2")
    assert [line.split()[1] for line in out.splitlines()[1:3]] == [
        "2026-11-05",
        "2026-11-04",
    ]
    assert "Newest 2 of 5 claims; --limit 0 shows all." in out
    everything, _, _ = run_command("jobclaims_status", "--limit", "0", "--json")
    assert len(json.loads(everything)["claims"]) == 5


def test_status_with_no_claims_says_so():
    out, _, status = run_command("jobclaims_status", "--job", "nothing_here")
    assert (out.splitlines()[0], status) == ("No claims match.", 0)


@pytest.mark.parametrize("arguments", [("--state", "stuck"), ("--limit", "-1")])
def test_status_refuses_bad_options(arguments):
    _, err, status = run_command("jobclaims_status", *arguments)
    assert status == 1
    assert "Error: argument" in err


# jobclaims_expire


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


# jobclaims_prune


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


def test_prune_needs_an_age():
    _, err, status = run_command("jobclaims_prune")
    assert status == 1
    assert "--older-than" in err


def test_status_counts_the_instances_that_skipped_each_claim():
    run = JobRun.objects.claim("charge", "2026-11-29", lease=datetime.timedelta(minutes=5))
    assert run is not None
    for _ in range(3):
        JobRun.objects.claim("charge", "2026-11-29", lease=datetime.timedelta(minutes=5))
    out, _, _ = run_command("jobclaims_status", "--json")
    [claim] = json.loads(out)["claims"]
    assert claim["skips"] == 3
    table, _, _ = run_command("jobclaims_status")
    assert table.splitlines()[1].split()[:5] == ["charge", "2026-11-29", "active", "1", "3"]
    assert run.release()


def test_status_lists_the_windows_no_instance_claimed():
    now = database_now()
    hourly = resolve("hourly")
    for hours_ago in (3, 0):
        with claim("sync", window="hourly", key=hourly.key_at(now - hours_ago * HOUR)):
            pass
    JobRun.objects.filter(window=hourly.key_at(now - 3 * HOUR)).update(claimed_at=now - 3 * HOUR)
    missed = [hourly.key_at(now - 2 * HOUR), hourly.key_at(now - HOUR)]
    out, _, _ = run_command("jobclaims_status", "--missed")
    assert f"sync: 2 missed windows: {', '.join(missed)}" in out
    document, _, _ = run_command("jobclaims_status", "--json", "--missed", "--job", "sync")
    assert json.loads(document)["missed_windows"] == {"sync": missed}


def test_status_lists_no_missed_windows_for_a_schedule_that_names_no_window():
    JobRun.objects.claim("flicker", "2026-11-29T10:00:00+00:00", lease=LEASE, schedule="0-second")
    out, err, status = run_command("jobclaims_status", "--missed")
    assert status == 0, err
    assert "missed" not in out


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
