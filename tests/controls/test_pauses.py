"""Pausing and resuming a job: every way it starts is refused while it is paused."""

from __future__ import annotations

import datetime
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from django.db import connection, connections

from jobclaims.claims.engine import Claim
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.claims.statements import claim_statements
from jobclaims.controls import pauses
from jobclaims.exceptions import NotClaimed, PausedBeforeStart, UnknownJob
from jobclaims.jobs.claiming import claim, claimed
from jobclaims.jobs.discovery import known_jobs, scheduled_jobs
from jobclaims.management.commands.jobclaims_cancel import TOLD
from jobclaims.models import JobPause, JobRun, JobSkip
from jobclaims.running.children import child_environment
from jobclaims.running.holding import PAUSES_READ_WITHIN, holding
from jobclaims.scheduling.scheduler import Scheduler
from jobclaims.testing import race, schedules_in_force_since, start
from jobclaims.time.clock import DatabaseNow, database_now
from tests.support.helpers import FUNCTIONS, commands_named, run_command, wait_until
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = datetime.timedelta(hours=1)

WINDOW = "2026-11-29T10:00+00:00"
LEASE = datetime.timedelta(minutes=1)


def test_a_paused_job_is_refused_with_its_own_reason_and_the_skip_is_recorded():
    pauses.pause("charge_ledger", by="alice", reason="the bank is down")
    refusal = JobRun.objects.try_claim("charge_ledger", WINDOW, lease=LEASE)
    assert isinstance(refusal, Refusal)
    assert refusal.reason == Reason.PAUSED
    assert refusal.paused is not None
    assert (refusal.paused.by, refusal.paused.reason) == ("alice", "the bank is down")
    assert "paused by alice at " in str(refusal)
    assert not JobRun.objects.exists()
    assert list(JobSkip.objects.values_list("job", "reason", "count")) == [
        ("charge_ledger", "paused", 1)
    ]


def test_a_resumed_job_is_claimed_again():
    pauses.pause("charge_ledger", by="alice")
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is None
    assert pauses.resume("charge_ledger", by="bob") == 1
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is not None
    pause = JobPause.objects.get()
    assert (pause.paused_by, pause.resumed_by) == ("alice", "bob")
    assert pause.resumed_at is not None


def test_a_pause_ends_by_itself_at_its_until_by_the_database_clock():
    until = database_now() + datetime.timedelta(hours=1)
    pauses.pause("charge_ledger", by="alice", until=until)
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is None
    JobPause.objects.update(until=DatabaseNow())  # The hour has gone by.
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is not None


def test_pausing_a_paused_job_replaces_its_pause():
    pauses.pause("charge_ledger", by="alice", reason="first")
    pauses.pause("charge_ledger", by="bob", reason="second")
    in_force = pauses.in_force("charge_ledger")
    assert in_force is not None
    assert in_force.reason == "second"
    assert JobPause.objects.in_force().count() == 1


def test_other_jobs_run_while_one_is_paused():
    pauses.pause("charge_ledger", by="alice")
    assert JobRun.objects.claim("charge_steps", WINDOW, lease=LEASE) is not None


def test_a_paused_job_command_at_verbosity_0_prints_nothing_and_exits_0():
    run_command("jobclaims_pause", "charge_ledger", "--reason", "vendor down")
    out, err, status = run_command("charge_ledger", "--window", WINDOW, "-v", "0")
    assert (out, err, status) == ("", "", 0)
    assert not Charge.objects.exists()


def test_a_paused_job_command_says_who_paused_it_and_how_to_resume():
    run_command("jobclaims_pause", "charge_ledger", "--reason", "vendor down")
    out, _, status = run_command("charge_ledger", "--window", WINDOW)
    assert status == 0
    assert out.startswith(f"Skipped charge_ledger {WINDOW}: paused by {pauses.os_user()} at ")
    assert "(vendor down); resume it with manage.py jobclaims_resume charge_ledger." in out


def test_a_schedule_of_a_paused_job_names_the_resume_of_the_job_and_it_works(monkeypatch):
    monkeypatch.setenv("SYNC_HOLD", "0")
    run_command("jobclaims_pause", "sync_regions")
    eu = ["sync_regions", "--region", "eu", "--schedule-name", "--region eu"]
    for started in (eu, ["jobclaims_run", "sync_regions[--region eu]"]):
        out, _, status = run_command(*started)
        assert status == 0
        assert "sync_regions[--region eu] " in out
        assert ": its job sync_regions was paused by " in out
        [resume] = commands_named(out)
        assert resume == ["jobclaims_resume", "sync_regions"]
    # The fix, followed: the resume it names lets the schedule's run start.
    assert run_command(*resume)[2] == 0
    out, err, status = run_command(*eu)
    assert status == 0, err
    assert "Ran sync_regions[--region eu] " in out


def test_the_pause_command_records_the_os_user_and_the_resume_command_lets_it_run():
    out, err, status = run_command("jobclaims_pause", "charge_ledger")
    assert status == 0, err
    assert out == "Paused charge_ledger until it is resumed: no run of it starts meanwhile.\n"
    assert JobPause.objects.get().paused_by == pauses.os_user()
    out, _, _ = run_command("jobclaims_resume", "charge_ledger")
    assert out == "Resumed charge_ledger: its next run starts as usual.\n"
    run_command("charge_ledger", "--window", WINDOW, "-v", "0")
    assert Charge.objects.count() == 1


def test_resuming_a_job_that_is_not_paused_changes_nothing_and_says_so():
    out, _, status = run_command("jobclaims_resume", "charge_ledger")
    assert (out, status) == ("charge_ledger was not paused; nothing was changed.\n", 0)
    assert not JobPause.objects.exists()


@pytest.mark.parametrize("command", ["jobclaims_pause", "jobclaims_resume"])
def test_an_unknown_job_is_refused_naming_the_known_ones_and_nothing_is_written(command):
    _, err, status = run_command(command, "charge_ledgr")
    assert status == 1
    assert "no job is named 'charge_ledgr'; name one of: " in err
    assert "charge_ledger" in err
    assert not JobPause.objects.exists()


def test_a_job_known_only_by_its_claims_can_be_paused():
    JobRun.objects.claim("sync_ledger", WINDOW, lease=LEASE)
    pauses.pause("sync_ledger", by="alice")
    with pytest.raises(UnknownJob):
        pauses.pause("sync_ledgr", by="alice")


def test_an_until_already_past_is_refused_naming_the_fix_and_nothing_is_written():
    _, err, status = run_command("jobclaims_pause", "charge_ledger", "--until", "2020-01-01")
    assert status == 1
    assert "has passed already; give a time still to come, or leave --until out" in err
    assert not JobPause.objects.exists()


@pytest.mark.parametrize(
    ("until", "message"),
    [
        ("tomorrow", "'tomorrow' is not an ISO 8601 date or date-time, like 2026-12-02T06:00"),
        (
            "2026-12-02T06:00+25:00",
            "'2026-12-02T06:00+25:00' has a UTC offset of 24 hours or more; an offset is "
            "between -23:59 and +23:59, like 2026-12-02T06:00",
        ),
    ],
)
def test_an_until_that_is_no_date_is_refused_naming_the_form(until, message):
    _, err, status = run_command("jobclaims_pause", "charge_ledger", "--until", until)
    assert status == 1
    assert message in err
    assert not JobPause.objects.exists()


def test_a_reason_longer_than_a_pause_keeps_is_refused_and_one_as_long_is_kept_whole():
    _, err, status = run_command("jobclaims_pause", "charge_ledger", "--reason", "x" * 1001)
    assert status == 1
    assert (
        "the reason is 1001 characters long, longer than the 1000 a pause keeps; shorten it" in err
    )
    assert not JobPause.objects.exists()
    assert run_command("jobclaims_pause", "charge_ledger", "--reason", "x" * 1000)[2] == 0
    assert JobPause.objects.get().reason == "x" * 1000


def test_a_claimed_function_of_a_paused_job_is_not_called():
    calls = []

    @claimed("sync_ledger", window="hourly")
    def sync() -> None:
        calls.append(1)

    JobRun.objects.claim("sync_ledger", "2026-01-01T00:00+00:00", lease=LEASE)
    JobRun.objects.get().release()
    pauses.pause("sync_ledger", by="alice")
    assert sync() is None
    assert calls == []


def test_a_claim_that_may_wait_does_not_wait_for_a_pause():
    JobRun.objects.claim("sync_ledger", "2026-01-01T00:00+00:00", lease=LEASE)
    pauses.pause("sync_ledger", by="alice")
    with (
        pytest.raises(NotClaimed) as refused,
        claim("sync_ledger", window="hourly", wait=datetime.timedelta(hours=1)),
    ):
        pass
    assert refused.value.refusal is not None
    assert refused.value.refusal.reason == Reason.PAUSED


@pytest.mark.xdist_group("fleets")
@pytest.mark.parametrize("paused", ["tick", pauses.ALL_JOBS], ids=["the job", "all jobs"])
def test_a_paused_job_is_refused_by_three_schedulers_cron_and_celery_then_runs_resumed(paused):
    pauses.pause(paused, by="alice", reason="the vendor is down")
    hosts = start("jobclaims_scheduler", "--job", "tick", instances=3)
    try:
        # All three hosts looked at one fire, and each was refused.
        refused_by_all = JobSkip.objects.filter(job="tick", reason="paused", count__gte=3)
        wait_until(refused_by_all.exists, "three schedulers to refuse one fire of the paused job")
        (cron,) = race("tick", "-v", "0", instances=1)
        assert (cron.returncode, cron.stdout, cron.stderr) == (0, "", ""), cron
        assert not Charge.objects.exists()
        pauses.resume(paused, by="alice")
        wait_until(
            lambda: Charge.objects.filter(job="tick").values("window").distinct().count() >= 2,
            "the resumed job to run at two fires",
        )
        for host in hosts:
            host.process.send_signal(signal.SIGTERM)
        results = [host.finish(timeout=30) for host in hosts]
    finally:
        for host in hosts:
            host.stop()
    assert [result.returncode for result in results] == [0, 0, 0], results
    charges = Counter(Charge.objects.filter(job="tick").values_list("window", flat=True))
    assert set(charges.values()) == {1}
    # The crontab-style start may have been refused at that same fire (a
    # fourth refusal): at least three, and none of those fires ran.
    refused = set(refused_by_all.values_list("window", flat=True))
    assert refused
    assert not refused & set(charges)


@pytest.mark.parametrize("paused", ["tests.slow", pauses.ALL_JOBS], ids=["the job", "all jobs"])
def test_a_claimed_celery_task_of_a_paused_job_is_refused_then_runs_resumed(paused):
    if os.environ.get("CI") != "true":  # Under CI a missing Celery fails the run.
        pytest.importorskip("celery")
    from tests.support.celeryapp import slow

    pauses.pause(paused, by="alice")
    assert slow.apply(args=[0.0]).get() is None
    assert not Charge.objects.exists()
    assert JobSkip.objects.get().reason == Reason.PAUSED
    pauses.resume(paused, by="alice")
    assert slow.apply(args=[0.0]).get() == JobRun.objects.get().window
    assert Charge.objects.filter(step=1).count() == 1


def test_fires_a_pause_refused_are_not_caught_up_by_the_misfire_policy_after_the_resume():
    job = next(each for each in scheduled_jobs() if each.job == "nightly_all")
    schedules_in_force_since(datetime.timedelta(days=30))
    now = database_now()
    latest = job.cron.latest_fire(now)
    assert latest is not None
    nights = [latest - datetime.timedelta(days=days) for days in (3, 2, 1, 0)]
    JobRun.objects.claim(job.job, job.slots.key_at(nights[0]), lease=LEASE)
    JobRun.objects.get().release()
    pauses.pause(job.job, by="alice")
    for night in nights[1:3]:
        assert JobRun.objects.claim(job.job, job.slots.key_at(night), lease=LEASE) is None
    pauses.resume(job.job, by="alice")
    scheduler = Scheduler([job], max_jobs=1, say=lambda line: None)
    assert scheduler._unclaimed(job, now) == [(nights[3], job.slots.key_at(nights[3]))]


def test_a_pause_of_a_job_holds_for_each_of_its_schedules_and_one_schedule_pauses_alone():
    pauses.pause("sync_regions", by="ops")
    eu, us = "sync_regions[--region eu]", "sync_regions[--region us]"
    for name in (eu, us):
        refusal = JobRun.objects.try_claim(name, "2026-11-29T10:00+00:00", lease=HOUR)
        assert isinstance(refusal, Refusal)
        assert refusal.reason == Reason.PAUSED
    pauses.resume("sync_regions", by="ops")
    pauses.pause(eu, by="ops")
    assert isinstance(JobRun.objects.try_claim(eu, "2026-11-29T10:00+00:00", lease=HOUR), Refusal)
    assert isinstance(JobRun.objects.try_claim(us, "2026-11-29T10:00+00:00", lease=HOUR), JobRun)


def test_a_schedule_is_listed_by_the_name_the_operator_commands_take():
    renamed = {"RESCHEDULED_JOB_NAME": "renamed", "RESCHEDULED_SCHEDULE": "0 0 * * *"}
    [listed] = race("jobclaims_scheduler", "--list", "--job", "renamed", instances=1, env=renamed)
    assert listed.stdout.startswith("renamed (command rescheduled): 0 0 * * * ("), listed
    label = listed.stdout.partition(" ")[0]
    for command in (
        ["jobclaims_pause", label],
        ["jobclaims_resume", label],
        ["jobclaims_run", label],
    ):
        [done] = race(*command, instances=1, env=renamed)
        assert done.returncode == 0, done.stderr
    assert Charge.objects.get().job == "renamed"


def test_cancelling_a_job_cancels_the_running_runs_of_its_schedules():
    for region in ("eu", "us"):
        JobRun.objects.claim(f"sync_regions[--region {region}]", WINDOW, lease=HOUR)
    out, err, status = run_command("jobclaims_cancel", "sync_regions")
    assert status == 0, err
    assert out == f"Cancelled 2 runs of sync_regions: {TOLD}\n"
    assert set(JobRun.objects.values_list("status", flat=True)) == {JobRun.Status.CANCELLED}


def pause_from_another_connection(job: str) -> None:
    """Commit a pause of ``job`` from a thread with a connection of its own."""

    failed: list[BaseException] = []

    def pause() -> None:
        try:
            pauses.pause(job, by="bob")
        except BaseException as error:
            failed.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=pause)
    thread.start()
    thread.join()
    assert not failed, failed


@pytest.mark.parametrize("taken_over", [False, True], ids=["a new window", "a failed window"])
def test_a_pause_that_commits_after_a_claim_read_the_pauses_refuses_the_claim(
    monkeypatch, taken_over
):
    # Failed on MariaDB and SQLite, where a new window's claim reads the
    # pauses before its INSERT, and on all three for a takeover: the pause
    # committed in between, and the claim won all the same.
    if not taken_over and claim_statements(connection).checks_refusals_in_insert(connection):
        pytest.skip("the claim's INSERT reads the pauses itself (PostgreSQL): no read before it")
    if taken_over:
        failed = JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE)
        assert failed is not None
        assert failed.release(JobRun.Status.FAILED, "boom")
    read = Claim._refusing

    def then_paused(claim: Claim, cursor: object) -> Refusal | None:
        found = read(claim, cursor)  # type: ignore[arg-type]
        if not pauses.in_force("charge_ledger"):
            pause_from_another_connection("charge_ledger")
        return found

    monkeypatch.setattr(Claim, "_refusing", then_paused)
    refusal = JobRun.objects.try_claim("charge_ledger", WINDOW, lease=LEASE)
    assert isinstance(refusal, Refusal), "the claim won after the pause had committed"
    assert refusal.reason == Reason.PAUSED
    assert refusal.paused is not None
    assert refusal.paused.by == "bob"
    if taken_over:
        row = JobRun.objects.get(window=WINDOW)
        assert (row.status, row.cancelled_by) == (JobRun.Status.CANCELLED, "bob")
        assert row.error.startswith("Not started: its job was paused by bob at ")
    else:
        assert not JobRun.objects.filter(window=WINDOW).exists()


@pytest.mark.parametrize("slotted", [False, True], ids=["a plain window", "a slot"])
def test_a_pause_the_claims_insert_missed_is_read_behind_its_commit_in_the_same_round_trip(
    monkeypatch, request, slotted
):
    # PostgreSQL and MariaDB read what refuses a claim right behind its
    # COMMIT, in the procedure that commits the claim. A claim made blind to
    # pauses (a copy of the procedure whose first look at them sees none)
    # stands for one whose snapshot came before the pause committed: the
    # read behind its COMMIT must still find the pause, and the claim give
    # its row back.
    statements = claim_statements(connection)
    if not statements.claims_then_reads(connection):
        pytest.skip("the claim and its read after the commit go in one round trip on SQLite")

    def blind(statement: str | None, count: int = -1) -> str:
        assert statement is not None
        return statement.replace("resumed_at IS NULL", "resumed_at IS NULL AND FALSE", count)

    def blind_claim(call: str | None) -> str:
        assert call is not None
        assert PROCEDURE in call
        return call.replace(PROCEDURE, "blind_claim_then_read(")

    # The procedure's first look at the pauses is its INSERT's (PostgreSQL)
    # or the read before it (MariaDB); the one after its COMMIT, the second.
    body = FUNCTIONS[connection.vendor][PROCEDURE.rstrip("(")].partition("(")[2]
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE PROCEDURE blind_claim_then_read({blind(body, 1)}")
    request.addfinalizer(drop_blind_procedure)
    sql = statements.sql
    monkeypatch.setattr(
        statements,
        "sql",
        sql._replace(
            pause=blind(sql.pause),
            pause_or_slot_run=blind(sql.pause_or_slot_run),
            claim_then_pause=blind_claim(sql.claim_then_pause),
            claim_then_pause_or_slot_succeeded=blind_claim(sql.claim_then_pause_or_slot_succeeded),
        ),
    )
    pause_from_another_connection("charge_ledger")
    schedule = "hourly" if slotted else ""
    refusal = JobRun.objects.try_claim("charge_ledger", WINDOW, lease=LEASE, schedule=schedule)
    assert isinstance(refusal, Refusal), "the claim won after the pause had committed"
    assert refusal.reason == Reason.PAUSED
    assert not JobRun.objects.filter(window=WINDOW).exists()
    assert JobSkip.objects.get(window=WINDOW).reason == JobSkip.Reason.PAUSED


#: PostgreSQL's claim, as its statements call it.
PROCEDURE = "jobclaims_claim_then_read("


def drop_blind_procedure() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DROP PROCEDURE blind_claim_then_read")


def test_a_run_claimed_before_a_pause_does_not_start_after_it_and_says_so():
    # Failed when only the claim looked at the pauses: a run claimed before
    # a pause started after it (a scheduler's child starting up, a jitter).
    run = JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE)
    assert run is not None
    pauses.pause("charge_ledger", by="bob", reason="the vendor is down")
    time.sleep(PAUSES_READ_WITHIN)  # Later than the claim's own read can stand for a new one.
    with pytest.raises(PausedBeforeStart) as refused, holding(run, LEASE):
        pytest.fail("the run started after the pause")
    assert refused.value.refusal is not None
    assert refused.value.refusal.reason == Reason.PAUSED
    row = JobRun.objects.get(pk=run.pk)
    assert (row.status, row.cancelled_by) == (JobRun.Status.CANCELLED, "bob")
    assert row.expires_at <= database_now()  # Let go: its window opens on the resume.
    pauses.resume("charge_ledger", by="bob")
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is not None


def test_a_job_command_claimed_before_a_pause_says_why_it_did_not_start_and_is_quiet_at_v0(
    monkeypatch,
):
    # The pause commits between the command's claim and its start.
    from jobclaims.jobs import commands

    real = commands.holding

    def paused_first(run: JobRun, *args: object, **kwargs: object) -> object:
        pause_from_another_connection(run.job)
        # Later than the claim's own read of the pauses can stand for a new one.
        time.sleep(PAUSES_READ_WITHIN)
        return real(run, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(commands, "holding", paused_first)
    # At -v 0 (cron) it says nothing, as a skip says nothing.
    assert run_command("charge_ledger", "-v", "0") == ("", "", 0)
    pauses.resume("charge_ledger", by="bob")
    out, err, status = run_command("charge_ledger", "--window", "2026-11-29T11:00+00:00")
    assert (err, status) == ("", 0)
    assert "Did not start charge_ledger 2026-11-29T11:00+00:00: paused by bob at " in out
    assert "resume it with manage.py jobclaims_resume charge_ledger." in out
    assert not Charge.objects.exists()
    assert set(JobRun.objects.values_list("status", flat=True)) == {JobRun.Status.CANCELLED}


#: Pause cycles the race of claims and starts against pauses runs.
PAUSE_CYCLES = 20


class Claimers:
    """Processes claiming new windows of one job, and starting each a
    moment later (``tests.support.pause_claimers``), until they are ended."""

    def __init__(self, job: str, count: int):
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.support.pause_claimers", job],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, **child_environment()},
            )
            for _ in range(count)
        ]
        for process in self.processes:
            assert process.stdout is not None
            assert process.stdout.readline() == "ready\n"

    def end(self) -> list[list[str]]:
        """End them; each event each one printed, as its words."""
        said = [process.communicate(timeout=60)[0] for process in self.processes]
        return [line.split() for out in said for line in out.splitlines()]

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


# Timed to the millisecond: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_from_the_pauses_commit_no_claim_of_its_job_wins_and_no_run_of_it_starts():
    # Failed on MariaDB and SQLite when the pause was read only before the
    # claim's INSERT (a claim won after the pause had committed), and on
    # every database when a claim won just before the pause started its run
    # after the pause command had returned. The pause command runs in a
    # process of its own, as an operator's does; "returned" is when it
    # exited, read on the database clock.
    job = "pause_race"
    JobRun.objects.claim(job, "known", lease=LEASE)  # A job known by its claims.
    claimers = Claimers(job, count=2)
    paused_spans = []
    try:
        for _ in range(PAUSE_CYCLES):
            time.sleep(random.uniform(0.1, 0.4))  # Claims and starts under way.
            [pause] = start("jobclaims_pause", job)
            result = pause.finish(timeout=60)
            assert result.returncode == 0, result
            returned = database_now()
            time.sleep(0.5)
            resumed = database_now()
            pauses.resume(job, by="test")
            paused_spans.append((returned, resumed))
    finally:
        events = claimers.end()
        claimers.kill()
    won = {words[1]: at(words[2]) for words in events if words[0] == "won"}
    started = {words[1]: at(words[2]) for words in events if words[0] == "started"}
    given_back = [words[1] for words in events if words[0] == "given-back"]

    def while_paused(moments: dict[str, datetime.datetime]) -> list[str]:
        return sorted(
            window
            for window, moment in moments.items()
            if any(returned < moment < resumed for returned, resumed in paused_spans)
        )

    assert len(won) > PAUSE_CYCLES, "the claimers claimed throughout"
    assert while_paused(won) == []
    assert while_paused(started) == []
    # The claims won just before a pause, and started after it, gave their claims back.
    assert JobRun.objects.filter(window__in=given_back).exclude(status="cancelled").count() == 0


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


#: Each way a job starts, as a process of its own at -v 0, and the job
#: whose Charge rows count its runs: a crontab line's JobCommand, a
#: backfill, a @claimed function and a scheduler's look from cron (at a
#: fire every two seconds: a fire the pause refused is not caught up).
STARTS = [
    (("charge_ledger", "--window", WINDOW, "-v", "0"), "charge_ledger"),
    (
        (
            "jobclaims_run",
            "charge_backfilled",
            "--from",
            "2026-11-28T01:00",
            "--to",
            "2026-11-28T02:00",
            "-v",
            "0",
        ),
        "charge_backfilled",
    ),
    (("charge_decorated", "-v", "0"), "charge_decorated"),
    (("jobclaims_scheduler", "--once", "--job", "tick", "-v", "0"), "tick"),
]


def test_with_all_jobs_paused_no_way_a_job_starts_runs_and_each_is_quiet_then_all_run_resumed():
    # Failed before the pause of all jobs: each of these ran.
    [paused] = race("jobclaims_pause", "--all", "--reason", "maintenance", instances=1)
    assert paused.returncode == 0, paused
    assert (
        paused.stdout
        == "Paused all jobs until they are resumed: no run of any job starts meanwhile.\n"
    )
    for started, job in STARTS:
        [result] = race(*started, instances=1)
        assert (result.returncode, result.stderr) == (0, ""), result
        if job != "charge_decorated":  # Its command prints its own line.
            assert result.stdout == "", result
        assert not Charge.objects.filter(job=job).exists(), started
        assert JobSkip.objects.filter(job=job, reason=Reason.PAUSED).exists(), started
    assert not JobRun.objects.filter(status=JobRun.Status.SUCCEEDED).exists()
    [resumed] = race("jobclaims_resume", "--all", instances=1)
    assert resumed.returncode == 0, resumed
    for started, job in STARTS:

        def ran(started: tuple[str, ...] = started, job: str = job) -> bool:
            [result] = race(*started, instances=1)
            assert result.returncode == 0, result
            return Charge.objects.filter(job=job).exists()

        wait_until(ran, f"{started[0]} to run once all jobs are resumed", timeout=60)


def test_a_start_refused_by_the_pause_of_all_jobs_says_so_and_the_resume_it_names_works():
    run_command("jobclaims_pause", "--all", "--reason", "maintenance")
    [refused] = race("charge_ledger", "--window", WINDOW, instances=1)
    assert refused.returncode == 0, refused
    assert refused.stdout.startswith(
        f"Skipped charge_ledger {WINDOW}: all jobs paused by {pauses.os_user()} at "
    ), refused
    assert "(maintenance); resume them with manage.py jobclaims_resume --all." in refused.stdout
    [resume] = commands_named(refused.stdout)
    assert resume == ["jobclaims_resume", "--all"]
    out, err, status = run_command(*resume)
    assert (out, err, status) == (
        "Resumed all jobs: their next runs start as usual; a job paused on its own stays paused.\n",
        "",
        0,
    )
    assert run_command("charge_ledger", "--window", WINDOW, "-v", "0")[2] == 0
    assert Charge.objects.filter(job="charge_ledger").count() == 1


def test_resuming_one_job_while_all_are_paused_says_the_pause_of_all_still_holds_it():
    pauses.pause("charge_ledger", by="alice")
    pauses.pause(pauses.ALL_JOBS, by="bob")
    out, _, status = run_command("jobclaims_resume", "charge_ledger")
    assert status == 0
    assert out == (
        "Resumed charge_ledger, but all jobs are still paused by bob: no run of it starts "
        "until manage.py jobclaims_resume --all.\n"
    )
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is None
    out, _, _ = run_command("jobclaims_resume", "charge_ledger")
    assert out.startswith("charge_ledger was not paused on its own; nothing changed, but all ")
    # A job's own pause outlives the resume of all jobs.
    pauses.pause("charge_ledger", by="alice")
    assert pauses.resume(pauses.ALL_JOBS, by="bob") == 1
    assert JobRun.objects.claim("charge_ledger", WINDOW, lease=LEASE) is None
    assert JobRun.objects.claim("charge_steps", WINDOW, lease=LEASE) is not None


def test_a_pause_of_all_jobs_refuses_every_claim_and_names_itself():
    pauses.pause(pauses.ALL_JOBS, by="ops", reason="upgrade")
    for job in ("charge_ledger", "sync_regions[--region eu]", "never_heard_of"):
        refusal = JobRun.objects.try_claim(job, WINDOW, lease=LEASE)
        assert isinstance(refusal, Refusal), job
        assert refusal.reason == Reason.PAUSED
        assert str(refusal).startswith("all jobs paused by ops at "), refusal
    assert not JobRun.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--all", "charge_ledger"],
            "--all pauses every job, so name no job beside it; or name the job alone to pause "
            "only it",
        ),
        (["*"], "'*' is no job's name; pass --all to pause every job"),
        ([], "name the job to pause, or pass --all to pause every job"),
    ],
)
def test_a_pause_of_all_jobs_and_one_at_once_or_of_neither_is_refused_and_nothing_written(
    args, message
):
    _, err, status = run_command("jobclaims_pause", *args)
    assert (err, status) == (message, 1)
    assert not JobPause.objects.exists()


def test_no_job_can_claim_under_the_name_of_all_jobs():
    with pytest.raises(ValueError, match="is no job's name: it names all jobs in a pause"):
        JobRun.objects.claim(pauses.ALL_JOBS, WINDOW, lease=LEASE)
    assert not JobRun.objects.exists()


def test_status_shows_the_pause_of_all_jobs_beside_every_job():
    pauses.pause(pauses.ALL_JOBS, by="ops", reason="upgrade")
    for args in ([], ["--job", "charge_ledger"]):
        out, err, status = run_command("jobclaims_status", *args)
        assert (err, status) == ("", 0)
        assert "Paused: all jobs, by ops " in out
        assert "(upgrade)." in out


def test_the_pause_of_all_jobs_makes_no_job_of_its_name():
    # Failed when the pause's row made "*" a known job: listed among the
    # jobs an unknown name could have meant, and pausable, retirable, as one.
    pauses.pause(pauses.ALL_JOBS, by="ops")
    assert pauses.ALL_JOBS not in known_jobs()
    _, err, status = run_command("jobclaims_retire", pauses.ALL_JOBS)
    assert status == 1
    assert "no job is named '*'; name one of: " in err
    assert "'*'" not in err.partition("name one of: ")[2]
