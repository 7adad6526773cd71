"""Stored schedules through the Python API: each change checked, counted and made whole."""

from __future__ import annotations

import datetime
import re

import pytest

from jobclaims import EditConflict, UnknownJob, add_schedule, change_schedule, delete_schedule
from jobclaims.controls import pauses
from jobclaims.jobs.discovery import every_schedule
from jobclaims.models import StoredSchedule

pytestmark = pytest.mark.django_db(transaction=True)

UTC = datetime.timezone.utc


def stored(name: str):
    [job] = [job for job in every_schedule()[0] if job.job == name]
    return job


def test_an_added_schedule_runs_its_command_with_its_arguments_under_its_own_name(changes):
    add_schedule(
        by="alice",
        name="eu",
        command="regions",
        arguments="--region 'eu west'",
        expression="0 3 * * *",
        time_zone="Europe/Paris",
    )
    job = stored("regions[eu]")
    assert (job.command, job.args) == ("regions", ("--region", "eu west"))
    after = datetime.datetime(2026, 7, 1, tzinfo=UTC)
    # 03:00 in Paris is 01:00 UTC in summer.
    assert job.next_fires(after, 2) == [
        datetime.datetime(2026, 7, 1, 1, tzinfo=UTC),
        datetime.datetime(2026, 7, 2, 1, tzinfo=UTC),
    ]
    row = StoredSchedule.objects.get()
    assert (row.version, row.created_by, row.changed_by) == (1, "alice", "alice")
    assert changes() == 1


def test_a_schedule_of_a_task_enqueues_it_with_its_arguments_under_its_claim_name():
    add_schedule(
        by="alice",
        name="eu",
        task="tests.testapp.tasks.counted_fire",
        task_kwargs={"tag": "eu"},
        expression="*/5 * * * *",
    )
    job = stored("tests.testapp.tasks.counted_fire[eu]")
    assert job.task is not None
    assert (job.task.args, job.task.kwargs) == ((), {"tag": "eu"})


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"task": "tests.testapp.tasks.no_such_task"}, "cannot import the task"),
        ({"task": "tests.testapp.tasks.record_fire"}, "is not a Celery task or a Django task"),
        ({"task_args": {"a": 1}}, "must be a JSON list"),
        ({"task_kwargs": [1]}, "must be a JSON object"),
        ({"command": "regions"}, "a schedule runs a command or enqueues a task, not both"),
    ],
)
def test_a_task_schedule_that_could_not_run_is_refused_with_the_fix(fields, said, changes):
    good = {"name": "eu", "task": "tests.testapp.tasks.counted_fire", "expression": "0 * * * *"}
    with pytest.raises(ValueError, match=re.escape(said)):
        add_schedule(by="alice", **{**good, **fields})
    assert not StoredSchedule.objects.exists()
    assert changes() == 0


def test_each_kind_and_bound_reads_as_in_the_code():
    add_schedule(
        by="alice",
        name="eu",
        command="regions",
        expression="every 90 minutes",
        start="2026-12-01",
        end="2026-12-01T06:00",
        skip_dates="2026-12-25",
        max_runs=3,
    )
    # Every 90 minutes from the epoch, the first three from the start.
    fires = stored("regions[eu]").next_fires(datetime.datetime(2026, 11, 1, tzinfo=UTC), 5)
    start = datetime.datetime(2026, 12, 1, tzinfo=UTC)
    assert fires == [start + datetime.timedelta(minutes=90 * n) for n in range(3)]


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"command": "no_such_job"}, "no JobCommand is named 'no_such_job'; name one of:"),
        ({"expression": "61 * * * *"}, "schedule"),
        ({"time_zone": "Mars/Olympus"}, "Mars/Olympus"),
        ({"max_runs": 3}, "give it start="),
        ({"arguments": "--region 'eu"}, "quote them as in a shell"),
        ({"start": "2027-01-02", "end": "2027-01-01"}, "swap them"),
        ({"name": ""}, "name: This field cannot be blank."),
        ({"name": "x" * 101}, "name: Ensure this value has at most 100 characters"),
        ({"overlap": "sometimes"}, "overlap: Value 'sometimes' is not a valid choice."),
        # What the code refuses for a schedule of the command, as for its own.
        ({"command": "nightly_all", "overlap": "buffer"}, "and misfire = 'all' disagree"),
        ({"command": "charge_overlapping", "overlap": "skip"}, "and allow_overlap = True disagree"),
    ],
)
def test_a_schedule_that_could_not_run_is_refused_with_the_fix_and_nothing_written(
    fields, said, changes
):
    good = {"name": "eu", "command": "regions", "expression": "*/5 * * * *"}
    with pytest.raises(ValueError, match=re.escape(said)):
        add_schedule(by="alice", **{**good, **fields})
    assert not StoredSchedule.objects.exists()
    assert changes() == 0


def test_a_name_the_code_schedules_already_is_refused():
    # sync_regions' code schedules are named by their regions.
    with pytest.raises(
        ValueError, match="the code schedules sync_regions\\[--region eu\\] already"
    ):
        add_schedule(by="alice", name="--region eu", command="sync_regions", expression="0 * * * *")
    assert not StoredSchedule.objects.exists()


def test_a_name_taken_is_refused(changes):
    add_schedule(by="alice", name="eu", command="regions", expression="0 * * * *")
    with pytest.raises(ValueError, match="name: Stored schedule with this Name already exists"):
        add_schedule(by="bob", name="eu", command="regions", expression="30 * * * *")
    assert StoredSchedule.objects.get().expression == "0 * * * *"
    assert changes() == 1


def test_a_change_is_counted_versioned_and_signed(changes):
    add_schedule(by="alice", name="eu", command="regions", expression="0 * * * *")
    changed = change_schedule("eu", by="bob", expression="30 * * * *", version=1)
    assert (changed.expression, changed.version, changed.changed_by) == ("30 * * * *", 2, "bob")
    assert changed.created_by == "alice"
    assert changed.changed_at >= changed.created_at
    assert changes() == 2


def test_of_two_edits_made_from_one_version_the_second_is_refused_and_changes_nothing(changes):
    add_schedule(by="alice", name="eu", command="regions", expression="0 * * * *")
    change_schedule("eu", by="alice", expression="15 * * * *", version=1)
    with pytest.raises(EditConflict, match="changed by alice meanwhile \\(version 2, not 1\\)"):
        change_schedule("eu", by="bob", expression="45 * * * *", version=1)
    with pytest.raises(EditConflict, match="changed by alice meanwhile"):
        delete_schedule("eu", by="bob", version=1)
    assert StoredSchedule.objects.get().expression == "15 * * * *"
    assert changes() == 2


def test_a_change_that_could_not_run_changes_nothing(changes):
    add_schedule(by="alice", name="eu", command="regions", expression="0 * * * *")
    with pytest.raises(ValueError, match="schedule"):
        change_schedule("eu", by="bob", expression="every never")
    with pytest.raises(TypeError, match="version_of_mine: not a field of a schedule"):
        change_schedule("eu", by="bob", version_of_mine=3)
    assert StoredSchedule.objects.get().expression == "0 * * * *"
    assert changes() == 1


def test_a_deleted_schedule_is_gone_from_the_schedules_and_counted(changes):
    add_schedule(by="alice", name="eu", command="regions", expression="0 * * * *")
    delete_schedule("eu", by="bob")
    assert not any(job.command == "regions" for job in every_schedule()[0])
    assert changes() == 2
    with pytest.raises(UnknownJob, match="no stored schedule is named 'eu'"):
        delete_schedule("eu", by="bob")


def test_a_stored_schedule_can_be_paused_before_its_first_fire():
    add_schedule(by="alice", name="eu", command="regions", expression="0 * * * *")
    pauses.pause("regions[eu]", by="alice", reason="vendor down")
    with pytest.raises(UnknownJob):
        pauses.pause("regions[us]", by="alice")
