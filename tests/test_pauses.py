"""Pausing and resuming a job: every way it starts is refused while it is paused."""

from __future__ import annotations

import datetime
import os
import signal
from collections import Counter

import pytest

from jobclaims import pauses
from jobclaims.claiming import claim, claimed
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.clock import DatabaseNow, database_now
from jobclaims.exceptions import NotClaimed, UnknownJob
from jobclaims.job_discovery import scheduled_jobs
from jobclaims.models import JobPause, JobRun, JobSkip
from jobclaims.scheduler import Scheduler
from jobclaims.testing import race, schedules_in_force_since, start
from tests.helpers import run_command, wait_until
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


def test_an_until_that_is_no_date_is_refused_naming_the_form():
    _, err, status = run_command("jobclaims_pause", "charge_ledger", "--until", "tomorrow")
    assert status == 1
    assert "'tomorrow' is not an ISO 8601 date or date-time, like 2026-12-02T06:00" in err
    assert not JobPause.objects.exists()


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
def test_a_paused_job_is_refused_by_three_schedulers_cron_and_celery_then_runs_resumed():
    pauses.pause("tick", by="alice", reason="the vendor is down")
    hosts = start("jobclaims_scheduler", "--job", "tick", instances=3)
    try:
        # All three hosts looked at one fire, and each was refused.
        refused_by_all = JobSkip.objects.filter(job="tick", reason="paused", count__gte=3)
        wait_until(refused_by_all.exists, "three schedulers to refuse one fire of the paused job")
        (cron,) = race("tick", "-v", "0", instances=1)
        assert (cron.returncode, cron.stdout, cron.stderr) == (0, "", ""), cron
        assert not Charge.objects.exists()
        pauses.resume("tick", by="alice")
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


def test_a_claimed_celery_task_of_a_paused_job_is_refused_then_runs_resumed():
    if os.environ.get("CI") != "true":  # Under CI a missing Celery fails the run.
        pytest.importorskip("celery")
    from tests.celeryapp import slow

    pauses.pause("tests.slow", by="alice")
    assert slow.apply(args=[0.0]).get() is None
    assert not Charge.objects.exists()
    assert JobSkip.objects.get().reason == Reason.PAUSED
    pauses.resume("tests.slow", by="alice")
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
