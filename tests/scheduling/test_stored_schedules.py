"""Stored schedules on a fleet of real schedulers: added, edited and deleted while they run.

Runs are counted from the job's own writes (``regions`` appends a line as
each run starts and ends), never from jobclaims' rows.
"""

from __future__ import annotations

import datetime
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, transaction
from django.test import Client
from django.urls import reverse

from jobclaims import add_schedule, change_schedule
from jobclaims.jobs.discovery import every_schedule
from jobclaims.jobs.stored_schedules import generation
from jobclaims.models import SchedulerSeen, StoredSchedule, StoredSchedulesGeneration
from jobclaims.scheduling import live_schedules
from jobclaims.scheduling.live_schedules import LiveSchedules
from jobclaims.testing import Instance, start
from jobclaims.time.clock import database_now
from tests.support.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HOSTS = 3
#: How soon an edit is in force on every scheduler, as docs/howto/stored-schedules.md
#: says: a look a second (``POLL``), and its claims, on a loaded machine.
BOUND = datetime.timedelta(seconds=3)
SECOND = datetime.timedelta(seconds=1)


@contextmanager
def fleet(tmp_path: Path) -> Iterator[list[Instance]]:
    """``HOSTS`` schedulers of ``regions``, which has no schedule in the code,
    each live (its seen row written) before the block runs; stopped after it
    by SIGTERM, each exiting 0."""
    env = {
        "APPENDED_LOG": str(tmp_path / "runs.log"),
        "REGIONS_FORKED": "1",
        "REGIONS_HOLD": "0.2",
    }
    hosts = start("jobclaims_scheduler", "--job", "regions", instances=HOSTS, env=env)
    try:
        wait_until(lambda: SchedulerSeen.objects.count() == HOSTS, "every scheduler to start")
        yield hosts
        for host in hosts:
            host.process.send_signal(signal.SIGTERM)
        results = [host.finish(timeout=60) for host in hosts]
    finally:
        for host in hosts:
            host.stop()
    assert [result.returncode for result in results] == [0] * HOSTS, results
    assert all("Traceback" not in result.stderr for result in results), results


def fires_run(tmp_path: Path) -> list[datetime.datetime]:
    """The fires whose runs started, oldest first, once it has checked that
    none started twice and every run that started ended."""
    log = tmp_path / "runs.log"
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    starts = Counter(fire for kind, fire, _pid in lines if kind == "start")
    assert {fire: count for fire, count in starts.items() if count > 1} == {}
    assert Counter(fire for kind, fire, _pid in lines if kind == "end") == starts
    return sorted(datetime.datetime.fromisoformat(fire.partition("@")[2]) for fire in starts)


def running_every_second(tmp_path: Path, **fields: str) -> None:
    """Store ``regions --region eu`` firing every second (with ``fields``),
    and wait for its first run to start."""
    add_schedule(
        by="alice",
        name="eu",
        command="regions",
        arguments="--region eu",
        expression="* * * * * *",
        overlap="skip",
        **fields,
    )
    log = tmp_path / "runs.log"
    wait_until(lambda: log.exists() and log.stat().st_size > 0, "the first fire to run")


def every(step: int, offset: int, first: datetime.datetime, last: datetime.datetime):
    """The instants from ``first`` to ``last`` (excluded) whose second of the
    minute is ``offset`` plus a multiple of ``step``: the definition of
    cron's ``offset-59/step`` seconds field, written out."""
    moment = first.replace(microsecond=0) + SECOND
    found = []
    while moment < last:
        if moment.second >= offset and (moment.second - offset) % step == 0:
            found.append(moment)
        moment += SECOND
    return found


def admin_post(client: Client, url: str, **fields: object) -> None:
    """Submit a stored schedule's form, or its deletion, as an operator would."""
    response = client.post(url, fields)
    assert response.status_code == 302, response.content.decode()


def ran_by(
    ran: list[datetime.datetime],
    since: datetime.datetime,
    until: datetime.datetime,
    version: tuple[int, int],
    following: tuple[int, int] | None,
) -> None:
    """Check that from within ``BOUND`` of ``since`` to ``until``, the fires
    that ran are those of ``version`` (a step and an offset of seconds),
    each of them but one due as the next change committed, and at most one
    of the ``following`` version: its latest fire before it came into
    force, run as an on-time fire (at most ``ON_TIME`` late), as an added
    schedule's is."""
    window = [fire for fire in ran if since + BOUND < fire < until]
    # A fire due as the change commits may be of the new version alone.
    assert set(every(*version, since + BOUND, until - SECOND)) <= set(window), window
    others = sorted(set(window) - set(every(*version, since + BOUND, until)))
    if following is None:
        assert others == [], window
        return
    step, _offset = following
    assert len(others) <= 1, window
    assert set(others) <= set(every(*following, until - step * SECOND, until)), window


@pytest.mark.xdist_group("fleets")
def test_a_schedule_added_edited_and_deleted_in_the_admin_runs_by_the_version_in_force(tmp_path):
    # Fails when a scheduler runs only the schedules it read as it started:
    # nothing runs, or the old version runs on after the edit or the delete.
    operator = Client()
    operator.force_login(User.objects.create_superuser("carol"))
    add = reverse("admin:jobclaims_storedschedule_add")
    # A fire whose process starts late (a host's fork server loading) runs
    # beside the next: what is counted is which fires run, not how fast.
    # No fire runs twice even so: each version keys an instant alike.
    form = {"name": "eu", "command": "regions", "arguments": "--region eu", "overlap": "allow"}
    with fleet(tmp_path):
        added = database_now()
        admin_post(operator, add, **form, expression="*/2 * * * * *")
        time.sleep(8)
        [stored] = StoredSchedule.objects.all()
        change = reverse("admin:jobclaims_storedschedule_change", args=[stored.pk])
        timed = database_now()  # Its time: odd seconds.
        admin_post(operator, change, **form, expression="1-59/2 * * * * *", read_version=1)
        time.sleep(8)
        kinded = database_now()  # Its kind: an interval.
        change_schedule("eu", by="bob", expression="every 3 seconds", version=2)
        time.sleep(9)
        deleted = database_now()
        delete = reverse("admin:jobclaims_storedschedule_delete", args=[stored.pk])
        admin_post(operator, delete, post="yes")
        time.sleep(4)

    ran = fires_run(tmp_path)
    # In force within the bound of its add, then on time, every fire of it.
    assert ran[0] <= added + BOUND
    ran_by(ran, ran[0] - BOUND - SECOND, timed, (2, 0), following=(2, 1))
    ran_by(ran, timed, kinded, (2, 1), following=(3, 0))
    ran_by(ran, kinded, deleted, (3, 0), following=None)
    # While a change reaches each scheduler, a fire of either version may
    # run (none twice: fires_run()); nothing starts once the delete is in force.
    assert [fire for fire in ran if fire > deleted + BOUND] == []
    assert StoredSchedule.objects.count() == 0


@pytest.mark.xdist_group("fleets")
def test_edits_every_two_seconds_that_move_no_fire_lose_none_and_run_none_twice(tmp_path):
    # An edit that changes the zone a schedule of every second is read in
    # moves none of its fires, but changes their keys (a key carries its
    # zone's offset) and the schedule's version: every scheduler starts the
    # new version as it reads it. Fails when a fire runs under both keys,
    # or when fires are lost while the versions change hands.
    zones = ["UTC", "Asia/Tokyo"]
    with fleet(tmp_path):
        running_every_second(tmp_path, time_zone=zones[0])
        time.sleep(3)  # Each host's fork server loaded: its first start is no slower.
        began = database_now()
        for edit in range(8):
            time.sleep(2)
            change_schedule("eu", by="bob", time_zone=zones[(edit + 1) % 2])
        ended = database_now()
        time.sleep(2)

    ran = [fire for fire in fires_run(tmp_path) if began < fire < ended]
    expected = every(1, 0, began, ended)
    lost = sorted(set(expected) - set(ran))
    # A version comes into force where a scheduler read it: a fire due as
    # an edit commits can be missed by both versions, one per edit at most.
    print(f"{len(expected)} fires, {len(ran)} ran, lost: {lost}")
    assert lost == []


def test_a_read_of_the_schedules_that_fails_is_read_again_at_the_next_look(monkeypatch):
    # Fails when the change's number is taken as read before the schedules
    # are: a scheduler whose read failed (a connection killed, a lock
    # timeout) runs the old version until the next change.
    add_schedule(by="alice", name="eu", command="regions", expression="0 3 * * *")
    live = LiveSchedules([], None, warn=print)
    assert [job.job for job in live.read()] == ["regions[eu]"]
    change_schedule("eu", by="bob", expression="0 4 * * *")
    failing = pytest.MonkeyPatch()
    failing.setattr(live_schedules, "stored_jobs", _lost_connection)
    with pytest.raises(OperationalError):
        live.changed()
    failing.undo()
    [job] = live.changed() or []
    assert job.cron.expression == "0 4 * * *"
    assert live.changed() is None


def _lost_connection(*args: object) -> None:
    raise OperationalError("server closed the connection unexpectedly")


def test_a_change_made_as_the_count_is_made_anew_is_not_taken_for_none():
    # A flush (or a restore) deletes the count's row; were it made anew at
    # 0, the change that makes it would bring it back to the number a
    # scheduler read before, and the scheduler would miss the change.
    add_schedule(by="alice", name="eu", command="regions", expression="0 3 * * *")
    live = LiveSchedules([], None, warn=print)
    live.read()
    read_at = live.read_at
    with transaction.atomic():
        StoredSchedule.objects.all().delete()
        StoredSchedulesGeneration.objects.all().delete()
        add_schedule(by="alice", name="us", command="regions", expression="0 3 * * *")
    assert generation() != read_at
    assert [job.job for job in live.changed() or []] == ["regions[us]"]


def test_a_stored_schedule_the_code_takes_over_is_left_out_and_said_once():
    # A deploy's code schedules the name a stored schedule had: the code's runs.
    StoredSchedule.objects.create(
        name="--region eu",
        command="sync_regions",
        expression="0 3 * * *",
        created_by="alice",
        changed_by="alice",
    )
    said: list[str] = []
    code = [job for job in every_schedule()[0] if job.command == "sync_regions"]
    live = LiveSchedules(code, ["sync_regions"], warn=said.append)
    jobs = live.read()
    assert [job.cron.expression for job in jobs if job.job == "sync_regions[--region eu]"] == [
        "*/3 * * * * *"
    ]
    assert said == [
        "Stored schedule sync_regions[--region eu]: the code schedules sync_regions[--region eu] "
        "already, which runs in this one's place; give this one another name, or delete it; "
        "it is left out until it is fixed"
    ]
    add_schedule(by="alice", name="late", command="sync_regions", expression="0 4 * * *")
    assert "sync_regions[late]" in [job.job for job in live.changed() or []]
    assert len(said) == 1
