"""The scheduler on several "hosts" at once: real processes against the test database."""

from __future__ import annotations

import datetime
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from jobclaims import testing
from jobclaims.claims import naming
from jobclaims.controls import pauses
from jobclaims.jobs.discovery import scheduled_jobs
from jobclaims.jobs.schedules import JobSchedule, Misfire
from jobclaims.models import JobRun, JobSkip, ScheduleVersion
from jobclaims.scheduling.schedule_versions import fingerprint
from jobclaims.scheduling.scheduler import Child, Scheduler
from jobclaims.testing import schedules_in_force_since, start
from jobclaims.time import cron
from jobclaims.time.clock import database_now
from jobclaims.time.cron import CronSchedule
from tests.support.helpers import lines_until, run_command, wait_until
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
    assert sorted(runs) == sorted(expected), {
        "not run": sorted(set(expected) - set(runs)),
        "not fires": [runs[key] for key in sorted(set(runs) - set(expected))],
        "killed at": killed_at,
    }
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
    # The scheduler's short start lease, time enough for the job to start
    # (a fresh interpreter beside a loaded CI's suites took more than 5 s).
    run = JobRun.objects.claim("tick", "2026-11-29T10:00:00+00:00", lease=15 * SECOND)
    assert run is not None
    # A job whose heartbeat first renews long after the start lease ended.
    [child] = start(
        "tick",
        *("--window", run.window, "--claim-token", str(run.token), "--lease", "60"),
        env={"TICK_HOLD": "18"},
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
    scheduler.start_due(database_now())  # Another look: its holder renews its lease.

    assert scheduler.children == {}
    holder.release()
    scheduler.start_due(database_now())
    assert scheduler.children == {}
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


@pytest.mark.django_db(transaction=False)
def test_a_scheduler_started_with_the_database_down_waits_for_it_and_stops_cleanly(vendor):
    # Fails when reading the stored schedules as it starts ends the
    # scheduler: systemd would restart it in a loop, rather than have it
    # wait for the database as it does once running.
    environment = {
        **testing.child_environment(),
        "DATABASE_URL": UNREACHABLE[vendor],
        "JOBCLAIMS_DATABASE_NAMES": "",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "jobclaims_scheduler", "--job", "tick"],
        env={**os.environ, **environment},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # A barrier, not a sleep: the loop says when it tries again, and it
    # stops on SIGTERM from then on; before it, a loaded machine may still
    # be starting Django, which SIGTERM ends as it ends any process.
    try:
        assert process.stderr is not None, "started with stderr=PIPE"
        said = lines_until(process, process.stderr, "; trying again in ")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    err = "".join(said) + err
    assert process.returncode == 0, (out, err)
    assert "Traceback" not in err
    assert err.startswith("The database did not answer ("), err


# Several schedules per job, a time zone per schedule, and jitter.

#: How many rounds of three ``--once`` schedulers the fleet tests run.
ROUNDS = 3


def once_rounds(
    job: str, gap: float, rounds: int = ROUNDS, env: dict[str, str] | None = None
) -> list[testing.InstanceResult]:
    """``rounds`` rounds of three ``--once`` schedulers of ``job`` released
    together, as three hosts' crontabs start them, ``gap`` seconds apart."""
    results = []
    for round_ in range(rounds):
        started = time.monotonic()
        results += testing.race("jobclaims_scheduler", "--once", "--job", job, instances=3, env=env)
        if round_ < rounds - 1:
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
    results = once_rounds("spread_calls", gap=20, rounds=1)
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


def test_a_look_that_read_the_clock_before_its_schedule_was_recorded_still_tries_its_fire():
    # A --once whose clock read came just before a fire's instant, and whose
    # schedule was first recorded just after it (a loaded host): the fire
    # due as it started is tried, here refused by a pause and recorded so.
    ScheduleVersion.objects.filter(job="tick").delete()
    pauses.pause(pauses.ALL_JOBS, by="ops")
    job = the_job("tick")
    instant = job.cron.latest_fire(database_now())
    assert instant is not None
    look = instant - datetime.timedelta(milliseconds=1)
    scheduler = Scheduler([job], max_jobs=1, say=print)
    scheduler.start_due(look)
    fire = job.cron.latest_fire(look)
    assert fire is not None
    assert list(JobSkip.objects.values_list("job", "window", "reason")) == [
        ("tick", job.slots.key_at(fire), JobSkip.Reason.PAUSED)
    ]
    assert scheduler.children == {}


#: Three schedules, none due at noon on 10 June 2026; the last fires at 12:01.
IDLE_SCHEDULES = ("0 0 1 1 *", "30 6 * * 1", "1 12 * * *")


def test_an_idle_scheduler_walks_each_schedule_once_per_fire_not_at_each_wake(monkeypatch):
    jobs = [
        JobSchedule(
            command="tick",
            job=f"idle_{number}",
            cron=CronSchedule(expression),
            window=None,
            lease=datetime.timedelta(minutes=1),
            allow_overlap=False,
            misfire=Misfire.SKIP,
            misfire_deadline=None,
        )
        for number, expression in enumerate(IDLE_SCHEDULES * 10)
    ]
    walks: Counter[str] = Counter()
    asked: Counter[str] = Counter()

    class CountedWalk(cron.CronSim):
        def __init__(self, expression: str, dt: datetime.datetime, reverse: bool = False):
            walks[expression] += 1
            super().__init__(expression, dt, reverse)

    def counted(name: str) -> Callable[[CronSchedule, datetime.datetime], datetime.datetime | None]:
        method: Callable[[CronSchedule, datetime.datetime], datetime.datetime | None]
        method = getattr(CronSchedule, name)

        def asking(self: CronSchedule, moment: datetime.datetime) -> datetime.datetime | None:
            asked[name] += 1
            return method(self, moment)

        return asking

    monkeypatch.setattr(cron, "CronSim", CountedWalk)
    monkeypatch.setattr(cron, "_AROUND", {})
    for name in ("latest_fire", "next_fire"):
        monkeypatch.setattr(CronSchedule, name, counted(name))
    scheduler = Scheduler(jobs, max_jobs=len(jobs), say=print)
    noon = at("2026-06-10T12:00:00+00:00")
    scheduler.start_due(noon)
    scheduler._sleep(noon)
    looked = sum(asked.values())
    # A minute of wake-ups between two fires: no job is looked at again.
    for second in range(1, 60):
        scheduler.start_due(noon + second * SECOND)
        scheduler._sleep(noon + second * SECOND)
    assert sum(asked.values()) == looked
    # Each expression walked back to its latest fire and on to its next, once.
    assert walks == dict.fromkeys(IDLE_SCHEDULES, 2)

    # Past the 12:01 fire (missed, as misfire = "skip" has it): that
    # expression is walked once more, for its ten jobs together.
    scheduler.start_due(at("2026-06-10T12:02:30+00:00"))
    assert walks == {**dict.fromkeys(IDLE_SCHEDULES, 2), "1 12 * * *": 4}
    assert not JobRun.objects.exists()


# The edges of once per fire (issue 34): a host lost mid-fire.


def appended_runs(log: Path) -> tuple[Counter[str], Counter[str]]:
    """How many runs of each window started, and how many ended, by the
    lines the ``appended`` job wrote."""
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    starts = Counter(window for kind, window, _pid in lines if kind == "start")
    ends = Counter(window for kind, window, _pid in lines if kind == "end")
    return starts, ends


def appended_in_force(schedule: str) -> None:
    """``appended``'s schedule, in force well before the fires the test looks at."""
    ScheduleVersion.objects.create(
        job="appended", fingerprint=fingerprint(schedule), schedule=schedule
    )
    ScheduleVersion.objects.filter(job="appended").update(since=database_now() - DAY)


@pytest.mark.xdist_group("fleets")
def test_a_cron_fleet_takes_over_the_fire_of_a_host_lost_mid_fire_after_newer_fires(tmp_path):
    log = tmp_path / "runs.log"
    schedule = "*/2 * * * * *"
    appended_in_force(schedule)
    fleet = {"APPENDED_SCHEDULE": schedule, "APPENDED_LEASE": "3", "APPENDED_LOG": str(log)}
    # Host A's crontab line starts a fire's job, and host A is lost in the
    # middle of it: its scheduler and the job, SIGKILL.
    [a] = start(
        "jobclaims_scheduler", "--once", "--job", "appended", env={**fleet, "APPENDED_HOLD": "60"}
    )
    try:
        wait_until(lambda: sum(appended_runs(log)[0].values()) == 1, "host A's job to start")
        [(_, lost, pid)] = [line.split() for line in log.read_text().splitlines()]
        os.kill(int(pid), signal.SIGKILL)
    finally:
        a.stop()
    # Newer fires come while no host looks, and the lost fire's lease ends.
    time.sleep(7)

    # The other hosts' crontab lines, every two seconds.
    once_rounds("appended", gap=2, env=fleet)

    starts, ends = appended_runs(log)
    # The lost fire ran again, once, to its end; every other fire ran once.
    assert (starts[lost], ends[lost]) == (2, 1), starts
    assert {window: count for window, count in starts.items() if window != lost} == {
        window: 1 for window in starts if window != lost
    }
    assert ends == dict.fromkeys(starts, 1)
    assert len(starts) >= 3
    taken_over = JobRun.objects.get(job="appended", window=lost)
    assert (taken_over.status, taken_over.attempt) == (JobRun.Status.SUCCEEDED, 2)


# A job that starts slower than its lease.


@pytest.mark.xdist_group("fleets")
def test_a_job_that_starts_slower_than_its_lease_runs_once(tmp_path):
    """Lease 2 s, a start of 5 s: the scheduler keeps the claim for the job's
    process until it has adopted it, and a host that looks meanwhile finds
    the fire held, not a holder that vanished."""
    log = tmp_path / "runs.log"
    schedule = "*/20 * * * * *"
    appended_in_force(schedule)
    slow = {
        "APPENDED_SCHEDULE": schedule,
        "APPENDED_LEASE": "2",
        "APPENDED_SETUP": "5",
        "APPENDED_LOG": str(log),
    }
    [a] = start("jobclaims_scheduler", "--once", "--job", "appended", env=slow)
    try:
        wait_until(
            lambda: JobRun.objects.filter(job="appended").exists(), "host A to claim the fire"
        )
        # Past the start lease, while the job's process still sets itself up.
        time.sleep(3)
        [b] = testing.race(
            "jobclaims_scheduler", "--once", "--job", "appended", instances=1, env=slow
        )
        result = a.finish(timeout=60)
    finally:
        a.stop()

    assert (result.returncode, b.returncode) == (0, 0), (result, b)
    starts, ends = appended_runs(log)
    # A's fire ran once; a B slowed past the next fire runs that one, once.
    [claimed_by_a] = JobRun.objects.filter(job="appended").order_by("claimed_at")[:1]
    assert starts[claimed_by_a.window] == 1, starts
    assert set(starts.values()) == {1}, starts
    assert ends == starts
    runs = JobRun.objects.filter(job="appended")
    assert {(run.status, run.attempt) for run in runs} == {(JobRun.Status.SUCCEEDED, 1)}


# A rolling deploy that renames a job's schedules.

#: How long each state of the rolling deploy lasts: two fires of each region.
DEPLOY_STEP = 4
#: What a run a scheduler's stop interrupted and handed off says (``attempts.hand_off()``).
STOP_HANDED_OFF = "Interrupted by a stop of its scheduler."


def regions_fleet(
    tmp_path: Path,
    hosts: int,
    env: dict[str, str],
    seconds: float,
    deploy: dict[str, str] | None = None,
    every_run_ends: bool = True,
) -> dict[str, list[datetime.datetime]]:
    """``hosts`` schedulers of ``regions`` (forked) with ``env`` for
    ``seconds``; with a ``deploy``, the code it changes to (more of the
    environment) replaces one host at a time after that, a ``DEPLOY_STEP``
    between each. Each region's fires that ran, oldest first, once it has
    checked that no fire ran twice and (unless runs are stopped, not
    ``every_run_ends``) every run that started ended.

    Forked, as a fleet runs a job every few seconds: a fresh interpreter per
    fire, seconds to start beside a whole suite, kept each host busy with a
    region past its next fire, and fires went unrun for want of a free host,
    which is capacity, not what a deploy does to schedules.
    """
    log = tmp_path / "runs.log"
    env = {**env, "APPENDED_LOG": str(log), "REGIONS_FORKED": "1"}
    new_code = {**env, **(deploy or {})}
    fleet = start("jobclaims_scheduler", "--job", "regions", instances=hosts, env=env)
    try:
        time.sleep(seconds)
        for number in range(hosts if deploy is not None else 0):
            fleet[number].process.send_signal(signal.SIGTERM)
            stopped = fleet[number].finish(timeout=60)
            assert stopped.returncode == 0, stopped
            [fleet[number]] = start("jobclaims_scheduler", "--job", "regions", env=new_code)
            time.sleep(DEPLOY_STEP)
        for host in fleet:
            host.process.send_signal(signal.SIGTERM)
        results = [host.finish(timeout=60) for host in fleet]
    finally:
        for host in fleet:
            host.stop()
    assert [result.returncode for result in results] == [0] * hosts, results
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    starts = Counter(fire for kind, fire, _pid in lines if kind == "start")
    assert {fire: count for fire, count in starts.items() if count > 1} == {}
    if every_run_ends:
        assert Counter(fire for kind, fire, _pid in lines if kind == "end") == starts
    return {
        region: sorted(at(fire.partition("@")[2]) for fire in starts if fire.startswith(region))
        for region in ("eu", "us")
    }


@pytest.mark.xdist_group("fleets")
def test_a_rolling_deploy_that_names_a_jobs_schedules_runs_each_fire_once(tmp_path):
    """Four hosts run ``regions``, whose two schedules are named by their
    arguments; a deploy gives them ``name=``, one host at a time: while old
    and new code run side by side, each fire of each region runs once."""
    schedule = "*/2 * * * * *"
    for name in ("--region eu", "--region us", "eu", "us"):
        ScheduleVersion.objects.create(
            job=f"regions[{name}]", fingerprint=fingerprint(schedule), schedule=schedule
        )
    ScheduleVersion.objects.update(since=database_now() - DAY)

    ran = regions_fleet(
        tmp_path, 4, {"REGIONS_SCHEDULE": schedule}, DEPLOY_STEP, deploy={"REGIONS_NAMED": "1"}
    )
    for region, fires in ran.items():
        expected = CronSchedule(schedule).fires_between(fires[0] - SECOND, fires[-1])
        # A host starved of CPU past a fire leaves it to the others: a few, not more.
        assert len(fires) >= len(expected) - 2, (region, fires)
    # Both names claimed fires: the deploy renamed them while they ran.
    claimed = set(JobRun.objects.values_list("job", flat=True))
    assert {"regions[--region eu]", "regions[eu]", "regions[--region us]", "regions[us]"} <= claimed


@pytest.mark.xdist_group("fleets")
def test_a_deploy_that_rewrites_a_cron_schedule_as_its_interval_runs_each_fire_once(tmp_path):
    """Three hosts run ``regions`` every three seconds by cron; a deploy
    writes the same times as an interval ("every 3 seconds"), one host at a
    time: the fires are the same instants with the same keys, so while both
    kinds run side by side each fire runs once, and after it the interval
    fires where whole periods from the epoch fall."""
    ran = regions_fleet(
        tmp_path,
        3,
        {"REGIONS_SCHEDULE": "*/3 * * * * *"},
        DEPLOY_STEP,
        deploy={"REGIONS_SCHEDULE": "every 3 seconds"},
    )
    for region, fires in ran.items():
        # Whole periods from the epoch, by the definition, and few missed.
        assert all(fire.timestamp() % 3 == 0 for fire in fires), fires
        span = (fires[-1] - fires[0]).total_seconds()
        assert len(fires) >= span / 3 + 1 - 2, (region, fires)
    # The interval claimed fires of its own once every host ran it.
    latest = JobRun.objects.filter(job="regions[--region eu]").latest("slot_start")
    assert latest.schedule == "every 3 seconds"


@pytest.mark.xdist_group("fleets")
def test_an_interval_from_a_start_runs_its_max_runs_once_each_on_three_hosts(tmp_path):
    # Far enough ahead for three schedulers to start on a loaded machine.
    first = (database_now() + 8 * SECOND).replace(microsecond=0)
    bounds = {"start": first.isoformat(), "max_runs": 3}
    env = {"REGIONS_SCHEDULE": "every 2 seconds", "REGIONS_BOUNDS": json.dumps(bounds)}
    ran = regions_fleet(tmp_path, 3, env, seconds=16)
    # Its start and the two fires after it, whole periods from the epoch.
    expected = [
        fire for fire in (first + n * SECOND for n in range(6)) if fire.timestamp() % 2 == 0
    ]
    assert ran == {"eu": expected[:3], "us": expected[:3]}


@pytest.mark.xdist_group("fleets")
def test_a_one_off_runs_once_on_three_hosts(tmp_path):
    fire = (database_now() + 6 * SECOND).replace(microsecond=0)
    env = {"REGIONS_SCHEDULE": f"at {fire.isoformat()}"}
    ran = regions_fleet(tmp_path, 3, env, seconds=10)
    assert ran == {"eu": [fire], "us": [fire]}


# Overlap policies: a fire whose run would overlap the run of an earlier one.


def regions_runs(region: str) -> list[JobRun]:
    return list(JobRun.objects.filter(job=f"regions[--region {region}]").order_by("claimed_at"))


@pytest.mark.xdist_group("fleets")
def test_a_buffered_fire_runs_as_soon_as_the_run_before_it_ends_on_three_hosts(tmp_path):
    # Runs of 4 s, a fire every 3: each fire finds the run before it going.
    env = {"REGIONS_SCHEDULE": "every 3 seconds", "REGIONS_HOLD": "4", "REGIONS_OVERLAP": "buffer"}
    regions_fleet(tmp_path, 3, env, seconds=15)
    for region in ("eu", "us"):
        runs = [run for run in regions_runs(region) if run.status == JobRun.Status.SUCCEEDED]
        assert len(runs) >= 3, runs
        waited = []
        for before, after in itertools.pairwise(runs):
            assert before.finished_at is not None
            # Never beside the run before it, and claimed within a look of its end.
            assert before.finished_at <= after.claimed_at, (before, after)
            assert after.claimed_at - before.finished_at < 2 * SECOND, (before, after)
            # One fire waited at most: the newest due at the look that claimed it.
            late = after.claimed_at - at(after.window)
            assert late < 3 * SECOND + SECOND, after
            waited.append(late >= SECOND)
            # The run tells why it started late (one held back may also
            # have started soon, the run before it ending soon after).
            assert after.overlap == "buffer" if late >= SECOND else after.overlap in ("", "buffer")
        # Fires held back, then run: a skipped fire never starts late.
        assert any(waited), runs
        assert runs[0].overlap == ""


@pytest.mark.xdist_group("fleets")
def test_a_replacing_fire_cancels_the_run_before_it_and_runs_once_it_stopped(tmp_path):
    # Runs that would take 60 s, a fire every 4, for five fires: a fire
    # that could not start before the next one (a cancelled run slow to
    # stop on a loaded machine) is superseded by it, as the misfire policy
    # says, and CI once saw two in a row go so in 13 s.
    env = {
        "REGIONS_SCHEDULE": "every 4 seconds",
        "REGIONS_HOLD": "60",
        "REGIONS_OVERLAP": "replace",
    }
    regions_fleet(tmp_path, 3, env, seconds=17, every_run_ends=False)
    for region in ("eu", "us"):
        runs = regions_runs(region)
        assert len(runs) >= 3, runs
        pairs = list(itertools.pairwise(runs))
        for index, (before, after) in enumerate(pairs):
            if STOP_HANDED_OFF in before.error:
                # The fleet's stop ended it, not the next fire: a host that
                # had not yet taken its own SIGTERM claimed that fire, or
                # took this one over, with nothing going to replace. The
                # stop comes at the fleet's end: one of its last two runs.
                assert index >= len(pairs) - 2, (index, before, after)
                continue
            said = (before, before.status, before.error, before.cancelled_by, after)
            assert before.status == JobRun.Status.CANCELLED, said
            assert "replacing it with the fire of" in before.cancelled_by, said
            assert before.cancelled_at is not None, said
            # Cancelled at the next fire, and that fire ran once the cancelled run let go.
            assert before.cancelled_at - at(after.window) < 2 * SECOND, (before, after)
            assert before.expires_at <= after.claimed_at, (before, after)
            assert after.claimed_at - at(after.window) < 4 * SECOND, (before, after)
            assert after.overlap == "replace", after


def test_a_replacing_fire_claimed_by_a_late_host_says_it_replaced_the_run_before_it(tmp_path):
    """The host that wins a replacing fire need not be one that held it
    back: one that looks late, once the cancelled run has ended, claims it
    outright, and its run must still say what it waited by. Here the only
    host looks after the run before the fire was cancelled and had ended:
    it never saw that run going."""
    schedule = "*/20 * * * * *"
    cron = CronSchedule(schedule)
    for region in ("eu", "us"):
        ScheduleVersion.objects.create(
            job=f"regions[--region {region}]", fingerprint=fingerprint(schedule), schedule=schedule
        )
    ScheduleVersion.objects.update(since=database_now() - DAY)

    def latest_fire() -> datetime.datetime:
        fire = cron.latest_fire(database_now())
        assert fire is not None, "a fire every 20 s"
        return fire

    def into_a_fire() -> datetime.timedelta:
        return database_now() - latest_fire()

    # A second or more past a fire, and 15 s or more before the next: the
    # scheduler's look below claims this fire, not the next.
    wait_until(lambda: SECOND <= into_a_fire() <= 5 * SECOND, "a fire a second ago", timeout=30)
    fire = latest_fire()
    before = fire - 20 * SECOND
    JobRun.objects.create(
        job="regions[--region eu]",
        window=cron.key(before),
        schedule=schedule,
        owner="a host that cancelled it for the next fire",
        status=JobRun.Status.CANCELLED,
        claimed_at=before,
        expires_at=fire + SECOND / 2,
        finished_at=fire + SECOND / 2,
        cancelled_by="jobclaims_scheduler, replacing it (overlap = replace)",
        cancelled_at=fire,
    )
    env = {
        "REGIONS_SCHEDULE": schedule,
        "REGIONS_OVERLAP": "replace",
        "REGIONS_HOLD": "0",
        "APPENDED_LOG": str(tmp_path / "runs.log"),
    }

    [host] = start("jobclaims_scheduler", "--once", "--job", "regions", env=env)
    result = host.finish(timeout=60)

    assert result.returncode == 0, result
    eu = JobRun.objects.get(job="regions[--region eu]", window=cron.key(fire))
    assert eu.status == JobRun.Status.SUCCEEDED, eu
    assert eu.overlap == "replace", eu
    # A fire that found no run going says nothing of the policy.
    assert JobRun.objects.get(job="regions[--region us]", window=cron.key(fire)).overlap == ""


def test_the_new_code_runs_again_a_fire_the_old_name_handed_off_or_left(tmp_path):
    """The last host of the old code stopped, handing a fire off, and another
    was lost mid-fire: the new code's scheduler runs both under the old name,
    as their claims were made."""
    log = tmp_path / "runs.log"
    schedule = "*/2 * * * * *"
    new_code = {"REGIONS_SCHEDULE": schedule, "REGIONS_NAMED": "1", "APPENDED_LOG": str(log)}
    now = database_now()
    cron = CronSchedule(schedule)
    handed_off, lost = (cron.key(fire) for fire in cron.fires_between(now - 9 * SECOND, now)[:2])
    for name in ("eu", "us"):
        ScheduleVersion.objects.create(
            job=f"regions[{name}]", fingerprint=fingerprint(schedule), schedule=schedule
        )
    ScheduleVersion.objects.update(since=now - DAY)
    for region, key, status in (
        ("eu", handed_off, JobRun.Status.RETRYING),
        ("us", lost, JobRun.Status.RUNNING),
    ):
        JobRun.objects.create(
            job=f"regions[--region {region}]",
            window=key,
            schedule=schedule,
            series=naming.series("regions", ["--region", region], schedule, "UTC"),
            status=status,
            retry_at=now - SECOND if status == JobRun.Status.RETRYING else None,
            expires_at=now - SECOND,
            owner="a host of the old code",
        )

    [host] = start("jobclaims_scheduler", "--once", "--job", "regions", env=new_code)
    result = host.finish(timeout=60)

    assert result.returncode == 0, result
    starts = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")]
    assert {f"eu@{handed_off}", f"us@{lost}"} <= set(starts)
    assert len(starts) == len(set(starts))
    for region, key in (("eu", handed_off), ("us", lost)):
        run = JobRun.objects.get(job=f"regions[--region {region}]", window=key)
        assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 2)
