"""Catching up counts only the fires a schedule had due while it was in force.

Real scheduler and job processes; runs are counted from the job's own
charges, not from jobclaims' table.
"""

from __future__ import annotations

import datetime

import pytest

from jobclaims.jobs.schedules import CATCH_UP_LIMIT, ON_TIME
from jobclaims.models import JobRun, ScheduleVersion
from jobclaims.scheduling.schedule_versions import fingerprint
from jobclaims.testing import start
from jobclaims.time.clock import database_now
from jobclaims.time.cron import CronSchedule
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

JOB = "rescheduled"
DAY = datetime.timedelta(days=1)


def deployed(schedule: str, misfire: str = "all") -> dict[str, str]:
    """The environment of a deploy whose ``rescheduled`` job has ``schedule``."""
    return {"RESCHEDULED_SCHEDULE": schedule, "RESCHEDULED_MISFIRE": misfire}


def run(*args: str, env: dict[str, str]) -> None:
    (process,) = start(*args, env=env)
    result = process.finish(timeout=120)
    assert result.returncode == 0, result


def scheduler_once(env: dict[str, str]) -> None:
    run("jobclaims_scheduler", "--once", "--job", JOB, env=env)


def charged() -> list[datetime.datetime]:
    """The fire each run charged for, oldest first."""
    windows = Charge.objects.filter(job=JOB).values_list("window", flat=True)
    return sorted(datetime.datetime.fromisoformat(window) for window in windows)


def in_force_since(schedule: str) -> datetime.datetime:
    return ScheduleVersion.objects.get(job=JOB, fingerprint=fingerprint(schedule)).since


def test_a_backfill_of_an_old_window_makes_no_catch_up_of_the_fires_since():
    schedule = "* * * * *"
    env = deployed(schedule)
    cron = CronSchedule(schedule)
    backfilled = cron.latest_fire(database_now() - datetime.timedelta(minutes=20))
    assert backfilled is not None
    run(JOB, "--window", cron.key(backfilled), env=env)
    deploy = database_now()

    scheduler_once(env)

    # The backfilled run, and the fire due as the schedule came into force.
    assert charged()[0] == backfilled
    assert [fire for fire in charged()[1:] if fire < deploy - ON_TIME] == []
    assert len(charged()) == 2
    assert in_force_since(schedule) >= deploy


def test_a_schedule_edit_catches_up_no_fire_from_before_the_edit():
    now = database_now()
    old, new = "0 0 * * *", "*/15 * * * *"
    midnight = CronSchedule(old).latest_fire(now)
    assert midnight is not None
    ScheduleVersion.objects.create(job=JOB, fingerprint=fingerprint(old), schedule=old)
    ScheduleVersion.objects.filter(job=JOB).update(since=midnight - 3 * DAY)
    old_deploys_nights(old, midnight)

    scheduler_once(deployed(new))

    # No quarter hour since midnight; a fire on time at the edit may run.
    assert [fire for fire in charged() if fire < now - ON_TIME] == []
    assert len(charged()) <= 1
    assert in_force_since(new) >= now


def test_a_deploy_that_respells_a_schedule_keeps_it_in_force_and_catches_up_its_fires():
    now = database_now()
    old, respelled = "*/15 * * * *", "0-59/15 * * * *"
    quarter = CronSchedule(old).latest_fire(now - datetime.timedelta(minutes=15))
    assert quarter is not None
    ScheduleVersion.objects.create(job=JOB, fingerprint=fingerprint(old), schedule=old)
    ScheduleVersion.objects.filter(job=JOB).update(since=quarter - DAY)
    before = quarter - datetime.timedelta(minutes=15)  # The old deploy's last run.
    JobRun.objects.create(
        job=JOB,
        window=CronSchedule(old).key(before),
        status=JobRun.Status.SUCCEEDED,
        claimed_at=before,
        expires_at=before,
        finished_at=before,
        owner="old deploy",
    )

    scheduler_once(deployed(respelled))

    # The same fires: still in force since the old spelling, so the quarter
    # hour missed while no scheduler ran is caught up, as misfire "all" says.
    assert fingerprint(respelled) == fingerprint(old)
    assert ScheduleVersion.objects.filter(job=JOB).count() == 1
    assert in_force_since(respelled) == quarter - DAY
    assert quarter in charged()


def old_deploys_nights(old: str, midnight: datetime.datetime) -> None:
    """The succeeded runs of the last three midnights, as the old deploy left them."""
    for days in (2, 1, 0):
        fire = midnight - days * DAY
        JobRun.objects.create(
            job=JOB,
            window=CronSchedule(old).key(fire),
            status=JobRun.Status.SUCCEEDED,
            claimed_at=fire,
            expires_at=fire,
            finished_at=fire,
            owner="old deploy",
        )


def test_health_of_the_edited_schedule_counts_no_fire_from_before_the_edit_as_missed():
    """The same edit, as a monitor of the new deploy sees it: the quarter
    hours since the old schedule's first claim were never due."""
    now = database_now()
    old, new = "0 0 * * *", "*/15 * * * *"
    midnight = CronSchedule(old).latest_fire(now)
    assert midnight is not None
    old_deploys_nights(old, midnight)
    scheduler_once(deployed(new))

    (check,) = start("jobclaims_status", "--check", "--job", JOB, env=deployed(new))
    result = check.finish(timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{JOB} is healthy.\n", "")


def test_a_first_deploy_runs_no_fire_from_before_it():
    schedule = "5 2 * * *"
    deploy = database_now()
    scheduler_once(deployed(schedule, misfire="latest"))

    assert [fire for fire in charged() if fire < deploy - ON_TIME] == []
    assert in_force_since(schedule) >= deploy


def test_a_schedule_back_in_force_catches_up_none_of_the_other_schedules_time():
    first, second = "*/15 * * * *", "0 0 * * *"
    for schedule in (first, second):
        ScheduleVersion.objects.create(
            job=JOB, fingerprint=fingerprint(schedule), schedule=schedule
        )
    now = database_now()
    ScheduleVersion.objects.filter(schedule=first).update(since=now - 3 * DAY)
    ScheduleVersion.objects.filter(schedule=second).update(since=now - 2 * DAY)
    key = CronSchedule(first).key(now - 3 * DAY + datetime.timedelta(minutes=15))
    JobRun.objects.create(
        job=JOB, window=key, status=JobRun.Status.SUCCEEDED, expires_at=now, owner="old deploy"
    )

    scheduler_once(deployed(first))

    assert [fire for fire in charged() if fire < now - ON_TIME] == []
    assert in_force_since(first) >= now


def test_a_backfill_after_the_schedule_came_into_force_catches_up_no_fire_before_it():
    """A first ``--once`` puts a seconds schedule in force and runs its fire
    then; an operator backfills a fire twenty minutes old; the next
    ``--once`` runs the fires since, and none of the minute before ``since``:
    its grace is for the one fire on time at that moment."""
    schedule = "*/5 * * * * *"
    env = deployed(schedule)
    scheduler_once(env)
    [first] = charged()
    cron = CronSchedule(schedule)
    backfilled = cron.latest_fire(database_now() - datetime.timedelta(minutes=20))
    assert backfilled is not None
    run(JOB, "--window", cron.key(backfilled), env=env)

    scheduler_once(env)

    assert charged()[:2] == [backfilled, first]
    assert len(set(charged())) == len(charged())


def test_catching_up_goes_on_after_a_backfill_older_than_one_look_reads():
    """Catching up reads the fires after the newest fire claimed: a backfill,
    the newest claim, of a window more than ``CATCH_UP_LIMIT`` fires old
    must not send it back to fires that all ran, and stop it there."""
    schedule = "*/5 * * * * *"
    cron = CronSchedule(schedule)
    now = database_now()
    ScheduleVersion.objects.create(job=JOB, fingerprint=fingerprint(schedule), schedule=schedule)
    ScheduleVersion.objects.update(since=now - DAY)
    # Every fire of the last half hour ran, but the last ten seconds'.
    ran = list(
        cron.fires_between(
            now - datetime.timedelta(minutes=30), now - datetime.timedelta(seconds=10)
        )
    )
    assert len(ran) > CATCH_UP_LIMIT
    JobRun.objects.bulk_create(
        JobRun(
            job=JOB,
            window=cron.key(fire),
            schedule=schedule,
            status=JobRun.Status.SUCCEEDED,
            slot_start=fire,
            slot_end=fire + datetime.timedelta(seconds=1),
            claimed_at=fire,
            expires_at=fire,
            finished_at=fire,
            owner="an earlier scheduler",
        )
        for fire in ran[1:]
    )
    # The oldest of them an operator ran just now.
    run(JOB, "--window", cron.key(ran[0]), env=deployed(schedule))

    scheduler_once(deployed(schedule))

    caught_up = [fire for fire in charged() if fire > ran[-1]]
    assert caught_up
    assert caught_up[0] == next(cron.fires_after(ran[-1]))
