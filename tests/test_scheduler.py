"""The scheduler on several "hosts" at once: real processes against the test database."""

from __future__ import annotations

import datetime
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from jobclaims import testing
from jobclaims.clock import database_now
from jobclaims.job_discovery import scheduled_jobs
from jobclaims.models import JobRun, JobSkip
from jobclaims.scheduler import Child, Scheduler
from jobclaims.schedules import JobSchedule
from jobclaims.testing import schedules_in_force_since, start
from tests.helpers import run_command
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

DAY = datetime.timedelta(days=1)
SECOND = datetime.timedelta(seconds=1)
#: How long the fleet runs, and when one of its schedulers is killed.
FLEET_SECONDS = 30
KILL_AFTER = 16
#: Time enough for a started job to have run.
WINDUP = datetime.timedelta(seconds=5)


@pytest.fixture(autouse=True)
def schedules_long_in_force():
    """These tests' schedules were in force well before any fire they look at."""
    schedules_in_force_since(30 * DAY)


def the_job(name: str) -> JobSchedule:
    (job,) = [job for job in scheduled_jobs() if job.command == name]
    return job


@pytest.mark.xdist_group("fleets")
def test_three_schedulers_run_every_fire_once_even_when_one_is_killed():
    hosts = start("jobclaims_scheduler", "--job", "tick", instances=3)
    try:
        time.sleep(KILL_AFTER)
        hosts[0].process.kill()
        killed_at = database_now()
        time.sleep(FLEET_SECONDS - KILL_AFTER)
        stopped_at = database_now()
        for host in hosts[1:]:
            host.process.send_signal(signal.SIGTERM)
        results = [host.finish(timeout=30) for host in hosts[1:]]
    finally:
        for host in hosts:
            host.stop()
    assert [result.returncode for result in results] == [0, 0], results
    assert all("Stopping on SIGTERM" in result.stdout for result in results)

    job = the_job("tick")
    runs = {run.window: run for run in JobRun.objects.filter(job="tick")}
    fired = sorted(datetime.datetime.fromisoformat(key) for key in runs)
    expected = [
        key
        for _, key in job.slots.fires_between(fired[0] - datetime.timedelta(seconds=1), fired[-1])
    ]
    assert len(expected) >= FLEET_SECONDS // 2 - 3
    # Every fire ran, exactly once, and succeeded: none lost to the kill.
    assert sorted(runs) == sorted(expected)
    charges = Counter(Charge.objects.values_list("window", flat=True))
    # A job still starting when its scheduler was stopped was stopped with it.
    settled = [key for key in expected if runs[key].claimed_at < stopped_at - WINDUP]
    assert {key: charges[key] for key in settled} == dict.fromkeys(settled, 1)
    assert {runs[key].status for key in settled} == {JobRun.Status.SUCCEEDED}
    assert max(charges.values()) == 1
    # A fire whose run the stop interrupted (recorded failed) may be taken
    # over by a host not yet stopped; every settled fire ran at its first try.
    assert {runs[key].attempt for key in settled} == {1}

    # Each fire's skips come from the other hosts up then, each once: one row
    # per reason counts them, and names the last.
    owners = {run.owner for run in runs.values()} | set(
        JobSkip.objects.values_list("owner", flat=True)
    )
    killed = {owner for owner in owners if owner.split(":")[1] == str(hosts[0].process.pid)}
    looked, counted = 0, 0
    for key, run in runs.items():
        skips = list(JobSkip.objects.filter(job="tick", window=key))
        last_skippers = {skip.owner for skip in skips}
        assert run.owner not in last_skippers
        fire = datetime.datetime.fromisoformat(key)
        if abs((fire - killed_at).total_seconds()) < 2:
            continue  # The killed host may or may not have looked at this one.
        others = (owners if fire < killed_at else owners - killed) - {run.owner}
        # A host still running the previous fire's job leaves this one to the others.
        busy = {
            other.owner
            for other in runs.values()
            if other.owner != run.owner
            and other.claimed_at < fire < (other.finished_at or stopped_at)
        }
        assert last_skippers <= others, key
        assert sum(skip.count for skip in skips) <= len(others), key
        looked += len(others - busy)
        counted += sum(skip.count for skip in skips)
    # A host starved of CPU for longer than the 2 s between fires (a loaded
    # CI machine) wakes past a fire and never looks at it: a few such fires,
    # not more.
    assert counted >= looked - len(runs) // 5, (counted, looked)


def nightly_runs(name: str) -> list[str]:
    return list(
        JobRun.objects.filter(job=name, status=JobRun.Status.SUCCEEDED)
        .order_by("claimed_at")
        .values_list("window", flat=True)
    )


def test_each_misfire_policy_does_what_it_says_when_a_scheduler_comes_back():
    now = database_now()
    names = ["nightly_skip", "nightly_latest", "nightly_all"]
    fires = {}
    for name in names:
        job = the_job(name)
        latest = job.cron.latest_fire(now)
        assert latest is not None
        fires[name] = [job.slots.key_at(latest - days * DAY) for days in (3, 2, 1, 0)]
        # Three days ago every scheduler was up; since then, none.
        JobRun.objects.create(
            job=name,
            window=fires[name][0],
            status=JobRun.Status.SUCCEEDED,
            claimed_at=latest - 3 * DAY,
            expires_at=latest - 3 * DAY,
            finished_at=latest - 3 * DAY,
            owner="gone",
        )
    back = [start("jobclaims_scheduler", "--once", "--job", name)[0] for name in names]
    results = [host.finish(timeout=60) for host in back]
    assert [result.returncode for result in results] == [0, 0, 0], results

    assert nightly_runs("nightly_skip") == fires["nightly_skip"][:1]
    assert nightly_runs("nightly_latest") == [
        fires["nightly_latest"][0],
        fires["nightly_latest"][3],
    ]
    assert nightly_runs("nightly_all") == fires["nightly_all"]

    out, _, _ = run_command("jobclaims_scheduler", "--list", "--job", "nightly_skip")
    assert "misfire: skip" in out
    assert f"missed: 3, the latest {fires['nightly_skip'][3]}" in out
    out, _, _ = run_command("jobclaims_scheduler", "--list", "--job", "nightly_all")
    assert f"caught up late: 3, the latest {fires['nightly_all'][3]}" in out
    assert "missed" not in out


def test_a_child_that_dies_before_adopting_its_claim_has_it_recorded_failed():
    job = the_job("tick")
    run = JobRun.objects.claim("tick", "2026-11-29T10:00:00+00:00", lease=job.lease)
    assert run is not None
    lines: list[str] = []
    scheduler = Scheduler([job], max_jobs=1, say=lines.append)
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    scheduler.children["tick"] = Child(job, run, process)
    process.wait()
    scheduler.reap()
    run.refresh_from_db()
    assert run.status == JobRun.Status.FAILED
    assert "exited with status 3 without recording" in run.error
    assert "exited 3" in lines[0]
    assert "recorded failed" in lines[0]


def test_a_child_runs_under_the_claim_it_was_given_and_records_it():
    job = the_job("tick")
    run = JobRun.objects.claim("tick", "2026-11-29T10:00:00+00:00", lease=job.lease)
    assert run is not None
    out, err, status = run_command("tick", "--window", run.window, "--claim-token", str(run.token))
    assert status == 0, err
    assert out.startswith("Adopted tick 2026-11-29T10:00:00+00:00 (attempt 1)")
    run.refresh_from_db()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 1)
    assert not JobSkip.objects.exists()


def test_a_child_renews_the_schedulers_short_claim_to_the_jobs_lease():
    job = the_job("tick")
    # The scheduler's short start lease, time enough for the job to start.
    run = JobRun.objects.claim("tick", "2026-11-29T10:00:00+00:00", lease=5 * SECOND)
    assert run is not None
    # A job whose heartbeat first renews long after the start lease ended.
    [child] = start(
        "tick",
        *("--window", run.window, "--claim-token", str(run.token), "--lease", "60"),
        env={"TICK_HOLD": "8"},
    )
    deadline = time.monotonic() + 30
    while not Charge.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert Charge.objects.exists(), "the job never started"
    # Past the start lease (a slow start may be past it already), inside the job's own lease.
    time.sleep(max((run.expires_at - database_now()).total_seconds() + 0.5, 0))

    assert JobRun.objects.claim("tick", run.window, lease=job.lease) is None
    result = child.finish(timeout=30)
    assert result.returncode == 0, result
    run.refresh_from_db()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 1)
    assert Charge.objects.count() == 1


def test_a_fire_whose_scheduler_died_after_claiming_it_is_taken_over(monkeypatch):
    for name, value in testing.child_environment().items():
        monkeypatch.setenv(name, value)  # The job's process opens the test database.
    job = the_job("nightly_latest")
    fire = job.cron.latest_fire(database_now())
    assert fire is not None
    # Another host's scheduler claimed the fire and was killed before it
    # started the job: its claim runs on for the rest of its start lease.
    dead = JobRun.objects.create(
        job=job.job,
        window=job.slots.key_at(fire),
        claimed_at=fire,
        expires_at=database_now() + 2 * SECOND,
        owner="host-b:4242:killed",
    )
    lines: list[str] = []
    scheduler = Scheduler([job], max_jobs=1, say=lines.append)
    scheduler.start_due(fire + SECOND)  # This host, on time: refused.
    assert scheduler.children == {}
    assert JobSkip.objects.filter(job=job.job, window=dead.window).count() == 1

    time.sleep(2.5)
    scheduler.start_due(database_now())
    scheduler.shutdown()

    dead.refresh_from_db()
    assert (dead.status, dead.attempt) == (JobRun.Status.SUCCEEDED, 2)
    assert list(Charge.objects.values_list("window", flat=True)) == [dead.window]
    assert f"Started {job.job} {dead.window}" in lines[0]


def test_a_refused_fire_whose_holder_lives_is_left_to_it():
    job = the_job("nightly_latest")
    fire = job.cron.latest_fire(database_now())
    assert fire is not None
    holder = JobRun.objects.claim(
        job.job, job.slots.key_at(fire), lease=datetime.timedelta(minutes=5)
    )
    assert holder is not None
    scheduler = Scheduler([job], max_jobs=1, say=print)
    scheduler.start_due(fire + SECOND)
    scheduler.refused[job.job].look_at = fire  # Due for another look now.

    scheduler.start_due(database_now())

    assert scheduler.children == {}
    assert scheduler.refused[job.job].look_at > holder.expires_at
    holder.release()
    scheduler.refused[job.job].look_at = fire
    scheduler.start_due(database_now())
    assert job.job not in scheduler.refused
    assert not Charge.objects.exists()


def test_a_child_whose_claim_is_gone_runs_nothing():
    job = the_job("tick")
    run = JobRun.objects.claim("tick", "2026-11-29T10:00:00+00:00", lease=job.lease)
    assert run is not None
    JobRun.objects.expire()
    _, err, status = run_command("tick", "--window", run.window, "--claim-token", str(run.token))
    assert status == 1
    assert "no longer held" in err
    assert not Charge.objects.exists()


def test_the_missed_listing_of_a_scheduled_job_lists_its_unclaimed_fires():
    job = the_job("nightly_skip")
    latest = job.cron.latest_fire(database_now())
    assert latest is not None
    with_claim = job.slots.key_at(latest - 3 * DAY)
    JobRun.objects.create(
        job="nightly_skip",
        window=with_claim,
        status=JobRun.Status.SUCCEEDED,
        claimed_at=latest - 3 * DAY,
        expires_at=latest - 3 * DAY,
        owner="gone",
    )
    out, _, _ = run_command("jobclaims_status", "--missed", "--job", "nightly_skip")
    missed = ", ".join(job.slots.key_at(latest - days * DAY) for days in (2, 1, 0))
    assert f"nightly_skip: 3 missed windows: {missed}" in out


def test_once_from_cron_takes_over_the_fire_of_a_holder_that_vanished():
    job = the_job("nightly_latest")
    fire = job.cron.latest_fire(database_now())
    assert fire is not None
    # Its holder (a scheduler killed between claim and start, or a host
    # lost with the job running) is gone, and its lease has ended: no
    # scheduler that refused it is alive to remember it.
    vanished = JobRun.objects.create(
        job=job.job,
        window=job.slots.key_at(fire),
        claimed_at=fire,
        expires_at=database_now() - SECOND,
        owner="host-b:4242:vanished",
    )
    [host] = start("jobclaims_scheduler", "--once", "--job", "nightly_latest")
    result = host.finish(timeout=60)

    assert result.returncode == 0, result
    assert list(Charge.objects.values_list("window", flat=True)) == [vanished.window]
    vanished.refresh_from_db()
    assert (vanished.status, vanished.attempt) == (JobRun.Status.SUCCEEDED, 2)


def test_the_scheduler_says_nothing_at_verbosity_0_when_all_is_well():
    [host] = start("jobclaims_scheduler", "--once", "--job", "nightly_latest", "-v", "0")
    result = host.finish(timeout=60)

    assert result.returncode == 0, result
    assert result.stdout == ""
    assert Charge.objects.count() == 1


#: A server that is not there, for each backend the suite runs on.
UNREACHABLE = {
    "postgresql": "postgres://postgres@127.0.0.1:1/gone",
    "mysql": "mysql://root@127.0.0.1:1/gone",
    "sqlite": "sqlite:////nonexistent-folder/gone.sqlite3",
}


@pytest.mark.django_db(transaction=False)
def test_once_with_the_database_down_says_so_in_one_line_and_fails(vendor):
    environment = {
        **testing.child_environment(),
        "DATABASE_URL": UNREACHABLE[vendor],
        "JOBCLAIMS_DATABASE_NAMES": "",
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "jobclaims_scheduler", "--once"],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("CommandError: The database did not answer (")
    assert line.endswith("so nothing was started; the next --once tries again")


# Several schedules per job, a time zone per schedule, and jitter.

#: How many rounds of three ``--once`` schedulers the fleet tests run.
ROUNDS = 3


def once_rounds(job: str, gap: float, rounds: int = ROUNDS) -> list[testing.InstanceResult]:
    """``rounds`` rounds of three ``--once`` schedulers of ``job`` released
    together, as three hosts' crontabs start them, ``gap`` seconds apart."""
    results = []
    for _ in range(rounds):
        started = time.monotonic()
        results += testing.race("jobclaims_scheduler", "--once", "--job", job, instances=3)
        time.sleep(max(gap - (time.monotonic() - started), 0))
    assert [result.returncode for result in results] == [0] * len(results), results
    return results


@pytest.mark.xdist_group("fleets")
def test_two_regions_of_one_job_run_side_by_side_each_once_per_fire():
    results = once_rounds("sync_regions", gap=3)
    runs = list(JobRun.objects.filter(job__startswith="sync_regions["))
    by_region = {
        region: {run.window: run for run in runs if run.job == f"sync_regions[--region {region}]"}
        for region in ("eu", "us")
    }
    # Each region's fires are keyed in its own zone: eu's in TIME_ZONE, us's in New York.
    assert all(key.endswith("+00:00") for key in by_region["eu"])
    assert all(key.endswith("-05:00") for key in by_region["us"])
    fires = {region: {at(key) for key in keys} for region, keys in by_region.items()}
    assert fires["eu"] == fires["us"]
    assert len(fires["eu"]) >= ROUNDS - 1
    # Each fire of each region ran once, with its region's arguments, and succeeded.
    charges = Counter(Charge.objects.values_list("job", "window"))
    expected = {(region, key): 1 for region, keys in by_region.items() for key in keys}
    assert charges == expected
    assert {run.status for run in runs} == {JobRun.Status.SUCCEEDED}
    # Side by side: the regions' runs of each fire overlapped in time.
    for fire in fires["eu"]:
        eu, us = (
            next(run for key, run in by_region[region].items() if at(key) == fire)
            for region in ("eu", "us")
        )
        assert eu.finished_at is not None
        assert us.finished_at is not None
        assert eu.claimed_at < us.finished_at, fire
        assert us.claimed_at < eu.finished_at, fire
    # The scheduler says which zone a fire is in.
    said = "".join(result.stdout for result in results)
    assert re.search(r"Started sync_regions\[--region us\] \S+-05:00 \(America/New_York\)", said)


@pytest.mark.xdist_group("fleets")
def test_jitter_spreads_the_starts_of_a_fire_and_keeps_one_run_each():
    results = once_rounds("spread_calls", gap=20, rounds=2)
    charges = list(Charge.objects.values_list("job", "window", "step"))
    windows = {window for _, window, _ in charges}
    assert len(windows) >= 1
    # One run per call and fire, though three hosts looked at each.
    assert Counter((call, window) for call, window, _ in charges) == {
        (str(call), window): 1 for call in range(8) for window in windows
    }
    # Each waited a moment of the jitter after its claim, and then started.
    said = "".join(result.stdout for result in results)
    waits = {
        (call, window): float(wait)
        for call, window, wait in re.findall(
            r"Started spread_calls\[--call (\d+)\] (\S+) \(UTC\): .*, started "
            r"(\d+\.\d+) s after its claim \(jitter up to 0:00:15\)",
            said,
        )
    }
    assert sorted(waits) == sorted((call, window) for call, window, _ in charges)
    for call, window, step in charges:
        late, wait = step / 1000, waits[call, window]
        assert 0 <= wait <= 15, wait
        # A process's start, which a loaded machine makes seconds, comes on top.
        assert late >= wait - 0.01, (late, wait)
    # Not all at once: eight waits over 15 s spread by less than 3 s once in
    # ten thousand.
    for window in windows:
        spread = [wait for (_call, each), wait in waits.items() if each == window]
        assert max(spread) - min(spread) > 3, spread


def test_a_schedule_in_new_york_claims_the_fire_its_spring_forward_night_moves():
    results = testing.race("ny_open", "--window", "2026-03-08", instances=3)
    testing.assert_ran_once(results)
    (run,) = JobRun.objects.filter(job="ny_open")
    # 02:30 does not exist that night in New York: the fire is at 03:00 there.
    assert run.window == "2026-03-08T03:00-04:00"
    assert run.slot_start == at("2026-03-08T07:00+00:00")
    testing.assert_ran_once(testing.race("ny_open", "--window", "2026-11-01", instances=3))
    assert JobRun.objects.get(job="ny_open", slot_start=at("2026-11-01T07:30+00:00")).window == (
        "2026-11-01T02:30-05:00"
    )
    # The same fire named in UTC is the same claim: it is not run again.
    again = testing.race("ny_open", "--window", "2026-03-08T07:00+00:00")
    assert [result.outcome for result in again] == ["skipped", "skipped"]


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def test_a_fire_cancelled_while_it_waits_out_its_jitter_never_starts():
    job = next(job for job in scheduled_jobs() if job.job == "spread_calls[--call 0]")
    said: list[str] = []
    scheduler = Scheduler([job], max_jobs=1, say=said.append)
    now = database_now()
    scheduler.start_due(now)
    waiting = scheduler.delayed[job.job]
    assert scheduler.children == {}
    # Its claim lasts the start's lease and the jitter: the wait cannot outlast it.
    assert job.jitter is not None
    assert waiting.run.expires_at - waiting.run.claimed_at >= job.jitter
    JobRun.objects.filter(pk=waiting.run.pk).cancel("ops")
    waiting.start_at = 0.0
    scheduler.start_delayed()
    assert scheduler.children == {}
    assert scheduler.delayed == {}
    assert any("Did not start" in line and "while its start waited" in line for line in said)
    assert not Charge.objects.exists()
