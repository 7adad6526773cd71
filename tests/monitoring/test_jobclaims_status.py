"""jobclaims_status: the claims, their states, their skips and the missed windows."""

from __future__ import annotations

import datetime
import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobclaims.claims.rule import State
from jobclaims.jobs.claiming import claim
from jobclaims.models import JobPause, JobRun, SchedulerSeen
from jobclaims.scheduling.seen import fingerprint
from jobclaims.testing import race
from jobclaims.time.clock import database_now
from jobclaims.time.windows import resolve
from tests.support.factories import claim_in_state
from tests.support.helpers import run_command, run_python, states_of, unanswered_database_url
from tests.support.monitored import SCHEDULED

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("deployed_now")]

DAY = datetime.timedelta(days=1)
HOUR = datetime.timedelta(hours=1)
LEASE = datetime.timedelta(minutes=5)


def test_status_lists_each_claim_in_its_state_newest_first(one_of_each):
    out, _, status = run_command("jobclaims_status")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["JOB", "WINDOW", "STATE", "TRY", "SKIPS", "END", "OWNER"]
    states = [line.split()[2] for line in lines[1:8]]
    assert states == [
        "active",
        "cancelled",
        "timed-out",
        "retrying",
        "failed",
        "succeeded",
        "expired",
    ]
    assert lines[-1] == "1 active, 1 expired."


def test_status_says_when_leases_end_and_runs_ended(one_of_each):
    out, _, _ = run_command("jobclaims_status")
    rows = {line.split()[2]: line for line in out.splitlines()[1:8]}
    assert " in 9 min " in rows["active"] or " in 10 min " in rows["active"]
    assert " 1 min ago " in rows["expired"]
    assert " now " in rows["succeeded"] or " 1 s ago " in rows["succeeded"]


class Terminal(StringIO):
    """What a terminal gives the command: a stream that is one."""

    def isatty(self) -> bool:
        return True


def test_status_fits_its_terminal_however_long_the_names(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    claim_in_state(State.ACTIVE, "j" * 200, "w" * 64, owner="h" * 200 + ":1:abcdef01")
    claim_in_state(State.FAILED, "short", "2026-11-29")
    call_command("jobclaims_status", stdout=(terminal := Terminal()))
    out = terminal.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" in out
    assert "short  " in out


def test_status_piped_to_grep_or_a_file_cuts_no_name(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    claim_in_state(State.ACTIVE, "charge_invoices_for_every_region", "w" * 64, owner="h" * 60)
    out, _, _ = run_command("jobclaims_status")
    assert "charge_invoices_for_every_region  " + "w" * 64 in out
    assert "…" not in out


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
        "failures",
        "retry_at",
        "skips",
        "last_skipped_at",
        "claimed_at",
        "expires_at",
        "finished_at",
    }
    assert failed["owner"] == one_of_each[State.FAILED].owner
    assert datetime.datetime.fromisoformat(failed["finished_at"])
    retrying = next(claim for claim in document["claims"] if claim["state"] == "retrying")
    assert datetime.datetime.fromisoformat(retrying["retry_at"])


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


def check_status(*arguments: str) -> tuple[str, str, int | None]:
    """``jobclaims_status --check``'s output and its exit status, as cron sees them."""
    with pytest.raises(CommandError) as raised:
        call_command("jobclaims_status", "--check", *arguments, stdout=(out := StringIO()))
    return out.getvalue(), str(raised.value), raised.value.returncode


def test_check_of_an_unknown_job_exits_unknown_naming_the_known_jobs():
    JobRun.objects.claim("charge_invoices", "2026-11-29", lease=LEASE)
    out, said, code = check_status("--job", "charge_invoice")
    assert (out, code) == ("", 3)
    said, _, named = said.partition("the known jobs are: ")
    assert said == "UNKNOWN: 'charge_invoice' is not a known job; "
    # The jobs that exist (jobclaims.jobs.discovery): claimed, scheduled, or
    # a command of the code that never ran.
    assert {"charge_invoices", *SCHEDULED, "always_fails"} <= set(named.split(", "))


@pytest.mark.django_db(transaction=True)
def test_check_exits_unknown_in_one_line_when_the_database_does_not_answer():
    done = run_python(
        "import django; django.setup()\n"
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(['manage.py', 'jobclaims_status', '--check'])\n",
        env={"DATABASE_URL": unanswered_database_url()},
    )
    assert (done.returncode, done.stdout) == (3, ""), done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("CommandError: UNKNOWN: the claims database did not answer: ")


@pytest.mark.django_db(transaction=True)
def test_check_at_verbosity_zero_is_silent_when_healthy_with_no_warning_on_sqlite():
    # A real process, as cron runs it: the system checks run there (W001 on SQLite).
    [result] = race("jobclaims_status", "--check", "-v", "0", instances=1)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_status_refuses_a_limit_no_database_takes_naming_the_fix():
    _, err, status = run_command("jobclaims_status", "--limit", "99999999999999999999")
    assert status == 1
    assert "is more claims than can be shown (at most 2147483647); pass 0 for no limit" in err


def test_status_lists_the_schedulers_seen_live_or_gone():
    now = database_now()
    for pid, seen_at in ((1, now), (2, now - HOUR)):
        SchedulerSeen.objects.create(
            host="web-1",
            pid=pid,
            schedules={"tick": "*/2 * * * * *"},
            fingerprint=fingerprint({"tick": "*/2 * * * * *"}),
            started_at=now - DAY,
            last_seen_at=seen_at,
        )
    out, _, _ = run_command("jobclaims_status")
    lines = [line for line in out.splitlines() if line.startswith("Scheduler ")]
    assert [line.partition("):")[0] + ")" for line in lines] == [
        "Scheduler web-1:1 (live)",
        "Scheduler web-1:2 (gone)",
    ]
    assert lines[1].endswith(
        f"seen 1 h ago, schedules {fingerprint({'tick': '*/2 * * * * *'})} of tick"
    )
    document, _, _ = run_command("jobclaims_status", "--json")
    assert [(row["pid"], row["live"]) for row in json.loads(document)["schedulers"]] == [
        (1, True),
        (2, False),
    ]


def test_the_schedules_view_shows_each_schedule_of_a_job_with_its_zone_args_and_jitter():
    out, _, _ = run_command("jobclaims_status", "--schedules", "--job", "sync_regions")
    assert "sync_regions[--region us]: */3 * * * * * (" in out
    assert ", America/New_York); misfire: latest" in out
    assert "  args: --region us" in out
    assert "sync_regions[--region eu]: */3 * * * * * (" in out
    out, _, _ = run_command("jobclaims_status", "--schedules", "--json", "--job", "spread_calls")
    documents = json.loads(out)["schedules"]
    assert len(documents) == 8
    first = next(each for each in documents if each["job"] == "spread_calls[--call 0]")
    assert first["args"] == ["--call", "0"]
    assert first["schedule_name"] == "--call 0"
    assert first["time_zone"] == "UTC"
    assert first["jitter_seconds"] == 15.0
    (us,) = [
        each
        for each in json.loads(run_command("jobclaims_status", "--schedules", "--json")[0])[
            "schedules"
        ]
        if each["job"] == "sync_regions[--region us]"
    ]
    assert us["time_zone"] == "America/New_York"
    assert all(fire.endswith("+00:00") for fire in us["next_fires"])


def test_the_table_keeps_rows_apart_at_80_columns_and_shows_the_pauses(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    owner = "ip-10-0-1-23.eu-west-1.compute.internal:12345:0c0ffee0"
    for region in ("eu", "us"):
        for second in ("03", "06"):
            window = f"2026-11-19T19:00:{second}-05:00"
            claim_in_state(State.ACTIVE, f"sync_regions[--region {region}]", window, owner=owner)
    JobPause.objects.create(job="sync_regions", paused_by="alice", reason="the bank is down")
    call_command("jobclaims_status", stdout=(terminal := Terminal()))
    lines = terminal.getvalue().splitlines()
    table = lines[:5]
    assert max(map(len, table)) <= 80, table
    cells = [line.split("  ")[:2] for line in table[1:]]
    assert len({tuple(cell) for cell in cells}) == 4, table  # Each row reads as its own.
    assert len({job for job, _ in cells}) == 2, table
    assert re.match(
        r"Paused: sync_regions, by alice (now|\d+ s ago) \(the bank is down\)\.$", lines[6]
    )
