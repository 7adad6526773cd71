"""Scheduled jobs watched by their schedule, the missed-runs signal and the
schedulers seen: what ``jobclaims_status --check``, the health page and the
metrics say, which must be the same."""

from __future__ import annotations

import datetime
import itertools
import re
import signal
import zoneinfo

import pytest
from django.test import override_settings

from jobclaims.jobs.discovery import scheduled_jobs
from jobclaims.jobs.schedules import ON_TIME, JobSchedule, Misfire
from jobclaims.models import JobRun, JobSkip, KnownCommand, SchedulerSeen, ScheduleVersion
from jobclaims.monitoring.health import (
    due_fire,
    fire_grace,
    job_health,
    missed_windows,
    read_health,
)
from jobclaims.monitoring.health_reads import scheduled
from jobclaims.scheduling.schedule_versions import fingerprint as schedule_fingerprint
from jobclaims.scheduling.schedule_versions import fingerprint_of
from jobclaims.scheduling.seen import fingerprint, schedules_run
from jobclaims.testing import InstanceResult, race, start
from jobclaims.time.clock import database_now
from jobclaims.time.cron import CronSchedule
from tests.contrib.test_prometheus import sample_values
from tests.support.helpers import run_command, wait_until
from tests.support.monitored import HOUR, HOURLY, SCHEDULED, hour_start, save_run
from tests.testapp.models import Charge

# The health page's check reads in a thread of its own: committed rows only.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("deployed_now")]

SECOND = datetime.timedelta(seconds=1)
MINUTE = datetime.timedelta(minutes=1)
DAY = datetime.timedelta(days=1)
CHECK = "ScheduledJobs()"
#: A daily job of tests/testapp, at midnight.
NIGHTLY = "nightly_latest"
#: How the nightly job is watched here, so that no test depends on the hour
#: it runs at. Its fire is due (``HEALTH_GRACE``) a minute after it, when an
#: unclaimed fire is missed too: with its default hour, from 00:01 to 01:00
#: the night's own fire, which these tests leave unclaimed, would be missed
#: and not yet due. Missed fires are looked for over two days: over one, the
#: due fire has left the look-back in the minute after midnight.
WATCH = {"HEALTH_GRACE": {NIGHTLY: ON_TIME}, "MISSED_LOOK_BACK": 2 * DAY}


@pytest.fixture(autouse=True)
def _watch_the_nightly_job(settings):
    settings.JOBCLAIMS = WATCH


def nightly_due(job: JobSchedule, now: datetime.datetime) -> datetime.datetime:
    """The nightly job's due fire at ``now``, as ``WATCH`` watches it."""
    due = due_fire(job, now, ON_TIME)
    assert due is not None
    return due


def the_job(name: str) -> JobSchedule:
    (job,) = [job for job in scheduled_jobs() if job.job == name]
    return job


def a_schedule(expression: str, lease: datetime.timedelta = 10 * MINUTE) -> JobSchedule:
    return JobSchedule(
        command="report",
        job="report",
        cron=CronSchedule(expression),
        window=None,
        lease=lease,
        allow_overlap=False,
        misfire=Misfire.LATEST,
        misfire_deadline=None,
    )


def verdicts(client) -> dict[str, set[str]]:
    """What is wrong with each job, as --check, the health page and the
    metrics say it; the test fails unless the three agree."""
    out, _err, status = run_command("jobclaims_status", "--check")
    by_check: dict[str, set[str]] = {}
    for line in out.splitlines() if status else ():
        job, kind, _rest = line.split(": ", 2)
        by_check.setdefault(job, set()).add(kind)
    assert (status == 0) == (not by_check)

    page = client.get("/health/?format=json")
    said = page.json()[CHECK]
    by_page: dict[str, set[str]] = {}
    if said != "OK":
        for part in said.removeprefix("Unavailable: ").split("; "):
            job, _, kinds = part.partition(": ")
            by_page[job] = set(kinds.split(", "))
    assert (page.status_code == 200) == (not by_page)

    scraped = client.get("/metrics/")
    assert scraped.status_code == 200
    by_metrics: dict[str, set[str]] = {}
    for (name, labels), value in sample_values(scraped.content.decode()).items():
        if name == "jobclaims_job_problem" and value == 1:
            named = dict(labels)
            by_metrics.setdefault(named["job_name"], set()).add(named["problem"].replace("_", " "))

    assert by_check == by_page == by_metrics
    return by_check


def seen(
    started: datetime.datetime,
    last_seen: datetime.datetime,
    schedules: dict[str, str],
    pid: int = 4242,
) -> SchedulerSeen:
    return SchedulerSeen.objects.create(
        host="web-1",
        pid=pid,
        schedules=schedules,
        fingerprint=fingerprint(schedules),
        started_at=started,
        last_seen_at=last_seen,
    )


def in_force(job: JobSchedule, since: datetime.datetime) -> ScheduleVersion:
    """Record ``job``'s schedule as in force since ``since``, as a scheduler's first look does."""
    return ScheduleVersion.objects.create(
        job=job.job,
        fingerprint=fingerprint_of(job),
        schedule=job.cron.expression,
        since=since,
    )


def run_fire(job: JobSchedule, fire: datetime.datetime, status: str = "succeeded") -> JobRun:
    """A claim of ``fire``, made as it fired, in ``status``."""
    return JobRun.objects.create(
        job=job.job,
        window=job.slots.key_at(fire),
        schedule=job.slots.recorded_schedule,
        owner="web-1:4242:0c0ffee0",
        status=status,
        claimed_at=fire,
        expires_at=fire + job.lease,
        finished_at=fire + SECOND,
    )


def test_the_default_grace_of_a_fire_is_the_time_to_the_next_within_bounds():
    fire = datetime.datetime(2026, 12, 1, 3, 0, tzinfo=datetime.timezone.utc)
    assert fire_grace(a_schedule("*/5 * * * * *"), fire) == MINUTE
    assert fire_grace(a_schedule("*/10 * * * *"), fire) == 10 * MINUTE
    assert fire_grace(a_schedule("0 3 1 * *"), fire) == HOUR
    assert fire_grace(a_schedule("0 3 1 * *", lease=3 * HOUR), fire) == 3 * HOUR


def test_the_due_fire_is_the_newest_whose_grace_has_passed():
    now = datetime.datetime(2026, 12, 1, 3, 0, 30, tzinfo=datetime.timezone.utc)
    every_five_seconds = a_schedule("*/5 * * * * *")
    assert due_fire(every_five_seconds, now, None) == now - MINUTE
    monthly = a_schedule("0 3 1 * *")
    assert due_fire(monthly, now, None) == datetime.datetime(
        2026, 11, 1, 3, 0, tzinfo=datetime.timezone.utc
    )
    assert due_fire(monthly, now, 10 * SECOND) == now - 30 * SECOND


def test_scheduled_jobs_just_deployed_are_known_and_healthy_before_any_scheduler_ran(client):
    health = {each.job: each for each in job_health()}
    assert sorted(health) == sorted(SCHEDULED)
    assert all(each.scheduled and each.healthy for each in health.values())
    out, _, status = run_command("jobclaims_status", "--check")
    assert (out, status) == (f"All {len(SCHEDULED)} jobs healthy.\n", 0)
    assert verdicts(client) == {}


def test_scheduled_jobs_deployed_past_the_grace_with_no_scheduler_have_no_live_scheduler(client):
    # Long enough ago that the frequent jobs are firmly overdue too, whenever each reader reads.
    deployed = database_now() - 10 * MINUTE
    KnownCommand.objects.update(first_seen_at=deployed)
    found = verdicts(client)
    assert set(found) == set(SCHEDULED)
    assert all("no live scheduler" in kinds for kinds in found.values())
    [health] = job_health(NIGHTLY)
    since = f"{deployed:%Y-%m-%d %H:%M:%S} UTC"
    assert f"no live scheduler: no scheduler has been seen running it since {since}" in (
        health.problems
    )
    # A project whose deploys never ran migrate: nothing says the jobs were deployed.
    KnownCommand.objects.all().delete()
    assert verdicts(client) == {}


def test_a_half_rolled_deploy_leaves_its_new_job_with_no_live_scheduler_whatever_else_runs(client):
    """The web process runs code with tick; the live schedulers still run the
    release before it, which had every other job: tick is new, and unrun."""
    now = database_now()
    others = {name: job.cron.expression for name, job in scheduled().items() if name != "tick"}
    seen(now - HOUR, now, others)
    KnownCommand.objects.filter(job="tick").update(first_seen_at=now - 2 * MINUTE)
    # A deploy has SCHEDULER_GRACE to start a scheduler that runs the new job.
    assert verdicts(client) == {}

    deployed = now - 10 * MINUTE
    KnownCommand.objects.filter(job="tick").update(first_seen_at=deployed)
    assert verdicts(client) == {"tick": {"no live scheduler", "overdue", "missed"}}
    [health] = job_health("tick")
    # Its fires count from the end of the deploy's grace: those since had no run.
    assert health.overdue is not None
    assert health.overdue.due_at >= deployed + 3 * MINUTE
    assert min(health.missed) >= the_job("tick").slots.key_at(deployed + 3 * MINUTE)

    # The deploy reaches one scheduler: it runs tick, and looks at it at its next fire.
    seen(now - MINUTE, now, {**others, "tick": the_job("tick").cron.expression}, pid=2)
    assert verdicts(client) == {}


def test_a_scheduled_job_is_overdue_when_its_due_fire_has_no_success(client):
    job = the_job(NIGHTLY)
    now = database_now()
    due = nightly_due(job, now)
    before = next(job.cron.fires_before(due - SECOND))
    run_fire(job, before)
    seen(before - HOUR, now, {NIGHTLY: job.cron.expression})
    in_force(job, before - HOUR)

    assert verdicts(client) == {NIGHTLY: {"overdue", "missed"}}
    [health] = job_health(NIGHTLY)
    assert health.overdue is not None
    assert health.overdue.window == job.slots.key_at(due)
    assert health.missed == [job.slots.key_at(due)]

    run_fire(job, due)
    assert verdicts(client) == {}


def test_a_scheduled_job_never_claimed_is_overdue_once_a_scheduler_ran_it_past_a_fire(client):
    job = the_job(NIGHTLY)
    now = database_now()
    due = nightly_due(job, now)
    # A scheduler started a minute before the due fire: that fire had no run.
    seen(due - MINUTE, now, {NIGHTLY: job.cron.expression})
    in_force(job, due - MINUTE)
    assert verdicts(client) == {NIGHTLY: {"overdue", "missed"}}


def test_a_scheduled_job_whose_schedule_came_into_force_after_its_due_fire_is_not_overdue(
    client,
):
    job = the_job(NIGHTLY)
    now = database_now()
    due = nightly_due(job, now)
    seen(due - HOUR, now, {NIGHTLY: job.cron.expression})
    in_force(job, due + SECOND)
    assert verdicts(client) == {}
    ScheduleVersion.objects.update(since=due)
    assert verdicts(client) == {NIGHTLY: {"overdue", "missed"}}


def test_one_missed_fire_trips_the_missed_signal_though_the_next_succeeded(client):
    job = the_job(NIGHTLY)
    now = database_now()
    due = nightly_due(job, now)
    skipped, older = itertools.islice(job.cron.fires_before(due - SECOND), 2)
    run_fire(job, older)
    run_fire(job, due)
    seen(older - HOUR, now, {NIGHTLY: job.cron.expression})
    in_force(job, older - HOUR)
    with override_settings(JOBCLAIMS={**WATCH, "MISSED_LOOK_BACK": 3 * DAY}):
        assert verdicts(client) == {NIGHTLY: {"missed"}}
        [health] = job_health(NIGHTLY)
    assert health.missed == [job.slots.key_at(skipped)]
    # Out of the look-back, the missed fire no longer trips it.
    with override_settings(JOBCLAIMS={**WATCH, "MISSED_LOOK_BACK": DAY}):
        assert verdicts(client) == {}


def test_an_hourly_job_that_misses_one_window_trips_the_missed_signal(client):
    this_hour = hour_start(database_now())
    for hours in (3, 2, 0):
        save_run("sync", this_hour - hours * HOUR + SECOND, JobRun.Status.SUCCEEDED)
    assert verdicts(client) == {"sync": {"missed"}}
    [health] = job_health("sync")
    assert health.missed == [HOURLY.key_at(this_hour - HOUR)]
    out, _, _ = run_command("jobclaims_status", "--check", "--job", "sync")
    assert out == (
        "sync: missed: 1 of its windows in the last 2 d had no claim "
        f"(latest: {HOURLY.key_at(this_hour - HOUR)})\n"
    )


def test_a_window_skipped_while_the_job_was_paused_is_not_missed(client):
    this_hour = hour_start(database_now())
    for hours in (3, 2, 0):
        save_run("sync", this_hour - hours * HOUR + SECOND, JobRun.Status.SUCCEEDED)
    # The hour between was skipped, not lost: an operator had paused the job.
    JobSkip.objects.create(
        job="sync",
        window=HOURLY.key_at(this_hour - HOUR),
        owner="web-1:4242:0c0ffee0",
        reason=JobSkip.Reason.PAUSED,
        skipped_at=this_hour - HOUR + SECOND,
    )
    assert verdicts(client) == {}
    # Many jobs, most of which claimed every hour: the skip is still found.
    for n in range(20):
        for hours in range(25):
            save_run(f"sync_{n}", this_hour - hours * HOUR + SECOND, JobRun.Status.SUCCEEDED)
    assert verdicts(client) == {}


def test_no_live_scheduler_when_the_schedulers_seen_are_past_their_grace(client):
    job = the_job(NIGHTLY)
    now = database_now()
    due = nightly_due(job, now)
    run_fire(job, due)
    seen(due - DAY, now - 10 * MINUTE, {NIGHTLY: job.cron.expression})
    assert verdicts(client) == {NIGHTLY: {"no live scheduler"}}
    [health] = job_health(NIGHTLY)
    assert health.problems == [
        "no live scheduler: none seen for 3 min; the last, web-1:4242, at "
        f"{(now - 10 * MINUTE):%Y-%m-%d %H:%M:%S} UTC"
    ]
    with override_settings(JOBCLAIMS={**WATCH, "SCHEDULER_GRACE": 20 * MINUTE}):
        assert verdicts(client) == {}


@pytest.mark.usefixtures("clear_of_midnight")
def test_no_live_scheduler_when_a_claimed_scheduled_job_has_never_seen_one(client):
    job = the_job(NIGHTLY)
    due = nightly_due(job, database_now())
    run_fire(job, due)
    assert verdicts(client) == {NIGHTLY: {"no live scheduler"}}


def test_hosts_disagree_when_live_schedulers_run_different_schedules_for_a_job(client):
    job = the_job(NIGHTLY)
    now = database_now()
    due = nightly_due(job, now)
    run_fire(job, due)
    seen(due - HOUR, now, {NIGHTLY: "0 0 * * *"}, pid=1)
    seen(due - HOUR, now, {NIGHTLY: "0 1 * * *"}, pid=2)
    # A scheduler started with --job for other jobs neither agrees nor disagrees.
    seen(due - HOUR, now, {"weekly_report": "0 6 * * 1"}, pid=3)
    assert verdicts(client) == {NIGHTLY: {"hosts disagree"}}
    [health] = job_health(NIGHTLY)
    assert health.problems == ["hosts disagree: web-1:1 runs '0 0 * * *', web-1:2 runs '0 1 * * *'"]


def test_a_stopped_scheduler_leaves_its_job_overdue_with_no_live_scheduler(client):
    [host] = start("jobclaims_scheduler", "--job", "tick")
    try:
        wait_until(lambda: Charge.objects.filter(job="tick").exists(), "a fire of tick to run")
        [row] = SchedulerSeen.objects.all()
        assert (row.pid, row.schedules) == (host.process.pid, {"tick": "*/2 * * * * *"})
        assert verdicts(client) == {}
        host.process.send_signal(signal.SIGTERM)
        result = host.finish(timeout=30)
    finally:
        host.stop()
    assert result.returncode == 0, result
    stopped = database_now()
    quick = {"HEALTH_GRACE": {"tick": SECOND}, "SCHEDULER_GRACE": SECOND}
    with override_settings(JOBCLAIMS=quick):
        # Two fires pass with no scheduler up: the due one has no run.
        wait_until(lambda: database_now() > stopped + 5 * SECOND, "two fires to pass")
        found = verdicts(client)
    assert found.pop("tick") == {"overdue", "no live scheduler"}
    # The scheduler ran tick alone (--job): no scheduler runs the others either.
    assert set(found) == set(SCHEDULED) - {"tick"}
    assert all("no live scheduler" in kinds for kinds in found.values())


def appended_on(schedule: str, log: str) -> dict[str, str]:
    """The environment of a host whose code schedules ``appended`` by ``schedule``."""
    return {"APPENDED_SCHEDULE": schedule, "APPENDED_LOG": log}


def check_appended(env: dict[str, str]) -> InstanceResult:
    """``jobclaims_status --check --job appended``, as an operator runs it on a host."""
    [check] = start("jobclaims_status", "--check", "--job", "appended", env=env)
    return check.finish(timeout=120)


@pytest.mark.xdist_group("fleets")
def test_a_scheduler_stopped_cleanly_is_gone_at_once_and_respellings_of_its_fires_agree(tmp_path):
    """Hosts run ``appended`` as ``*/3`` and as ``0-59/3`` (the same fires)
    and two as ``*/4`` (a deploy rolled back); the ``*/4`` ones are stopped:
    the check right after names none of them, where a host killed is live
    until its grace."""
    log = str(tmp_path / "runs.log")
    every_3 = appended_on("*/3 * * * * *", log)
    every_4 = appended_on("*/4 * * * * *", log)
    hosts = [
        *start("jobclaims_scheduler", "--job", "appended", env=every_3),
        *start(
            "jobclaims_scheduler", "--job", "appended", env=appended_on("0-59/3 * * * * *", log)
        ),
    ]
    rolled_back = start("jobclaims_scheduler", "--job", "appended", instances=2, env=every_4)
    try:
        wait_until(lambda: SchedulerSeen.objects.count() == 4, "the four schedulers to be seen")
        disagreeing = check_appended(every_3)
        assert disagreeing.returncode == 2, disagreeing
        assert "hosts disagree" in disagreeing.stdout
        for host in rolled_back:
            assert f":{host.process.pid} runs '*/4 * * * * *'" in disagreeing.stdout
        for host in rolled_back:
            host.process.send_signal(signal.SIGTERM)
        assert [host.finish(timeout=60).returncode for host in rolled_back] == [0, 0]

        agreeing = check_appended(every_3)
        assert (agreeing.returncode, agreeing.stderr) == (0, ""), agreeing
        assert agreeing.stdout.startswith("appended is healthy"), agreeing
        stopped = {str(host.process.pid) for host in rolled_back}
        for pid in stopped:
            assert pid not in agreeing.stdout
        rows = SchedulerSeen.objects.filter(pid__in=stopped)
        assert all(row.stopped_at is not None for row in rows)

        # A host killed said nothing: it may be running still, for all the
        # database knows, until SCHEDULER_GRACE has passed.
        [killed] = start("jobclaims_scheduler", "--job", "appended", env=every_4)
        wait_until(lambda: SchedulerSeen.objects.count() == 5, "the killed host to be seen")
        killed.process.kill()
        killed.finish(timeout=30)
        after_kill = check_appended(every_3)
        assert after_kill.returncode == 2, after_kill
        assert f":{killed.process.pid} runs '*/4 * * * * *'" in after_kill.stdout
    finally:
        for host in [*hosts, *rolled_back]:
            host.stop()


def test_a_once_that_ended_is_no_live_scheduler_and_keeps_its_job_watched_for_the_grace(client):
    """A crontab's ``--once`` ends within a second: it is no running
    scheduler to disagree with, and its job has a scheduler until the grace
    has passed, when the next minute's ``--once`` has come."""
    [once] = race("jobclaims_scheduler", "--once", "--job", "tick", instances=1)
    assert once.returncode == 0, once
    [row] = SchedulerSeen.objects.all()
    assert row.stopped_at is not None
    assert read_health().live_schedulers == []
    assert "tick" not in verdicts(client)


def test_the_missed_listing_of_a_scheduled_job_looks_back_a_thousand_fires():
    job = the_job("tick")
    now = database_now()
    first = job.cron.latest_fire(now - 10 * MINUTE)
    assert first is not None
    run_fire(job, first)
    expected = [key for _fire, key in job.slots.fires_between(first, now - MINUTE)]
    # Ten minutes of a fire every two seconds: some 270 fires, not the 50 it listed.
    assert len(expected) > 250
    # From the fire after the claimed one; fires may pass before it is read.
    assert missed_windows("tick")[: len(expected)] == expected
    out, _, _ = run_command("jobclaims_status", "--missed", "--job", "tick")
    # A fire or two more may pass while the command runs.
    listed = re.search(r"^tick: (\d+) missed windows: ", out, flags=re.M)
    assert listed is not None, out
    assert int(listed[1]) >= len(expected)


def test_fires_from_before_the_schedule_came_into_force_are_not_missed(client):
    """The nightly job ran at 01:00 until its schedule became midnight, two
    days ago: the midnights before had no run, and were never due."""
    job = the_job(NIGHTLY)
    now = database_now()
    due = nightly_due(job, now)
    fires = list(itertools.islice(job.cron.fires_before(due + SECOND), 5))  # Newest first.
    for old in fires[2:]:
        run_fire(job, old + HOUR)  # Keyed at 01:00, as the old schedule fired.
    came_in = fires[1] - HOUR
    ScheduleVersion.objects.create(
        job=NIGHTLY,
        fingerprint=schedule_fingerprint("0 1 * * *"),
        schedule="0 1 * * *",
        since=now - 30 * DAY,
    )
    in_force(job, came_in)
    for new in fires[:2]:
        run_fire(job, new)
    seen(came_in, now, {NIGHTLY: job.cron.expression})
    with override_settings(JOBCLAIMS={**WATCH, "MISSED_LOOK_BACK": 7 * DAY}):
        assert verdicts(client) == {}
        # Had the schedule been in force since the oldest claim, those midnights were missed.
        ScheduleVersion.objects.filter(
            fingerprint=schedule_fingerprint(job.cron.expression)
        ).update(since=fires[4])
        assert verdicts(client) == {NIGHTLY: {"missed"}}
        [health] = job_health(NIGHTLY)
    assert health.missed == [job.slots.key_at(fire) for fire in reversed(fires[2:])]


def test_a_schedule_no_scheduler_has_looked_at_has_no_fire_due(client):
    """Claims from before, and a live scheduler that has not looked at the
    job yet (it does at the job's next fire): nothing is overdue or missed
    until a scheduler records the schedule in force."""
    job = the_job(NIGHTLY)
    now = database_now()
    due = nightly_due(job, now)
    older = list(itertools.islice(job.cron.fires_before(due - SECOND), 2))[-1]
    run_fire(job, older)
    seen(older - HOUR, now, {NIGHTLY: job.cron.expression})
    assert verdicts(client) == {}

    # In force since before the claim: the fires since are due, and missed.
    version = in_force(job, older - HOUR)
    assert verdicts(client) == {NIGHTLY: {"overdue", "missed"}}
    # Another schedule recorded since (a deploy, then a revert): a
    # scheduler with this code takes the schedule as new when it looks.
    ScheduleVersion.objects.create(
        job=NIGHTLY, fingerprint="0123456789abcdef", schedule="0 1 * * *", since=version.since + DAY
    )
    assert verdicts(client) == {}


def test_a_schedule_in_a_zone_of_its_own_is_overdue_in_that_zones_time(client):
    job = the_job("ny_open")
    now = database_now()
    due = due_fire(job, now, None)
    assert due is not None
    seen(due - MINUTE, now, schedules_run([job]))
    in_force(job, due - MINUTE)
    assert verdicts(client) == {"ny_open": {"overdue", "missed"}}
    [health] = job_health("ny_open")
    local = due.astimezone(zoneinfo.ZoneInfo("America/New_York"))
    key = job.slots.key_at(due)
    assert health.problems[0].startswith(
        f"overdue: the {key} window, due {local:%Y-%m-%d %H:%M:%S %Z} (America/New_York)"
    )
    assert key == local.isoformat("T", "minutes")
