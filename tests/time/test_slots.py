"""Slots: one run per interval of time, however a deploy spells its window."""

from __future__ import annotations

import contextlib
import datetime
import itertools

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from jobclaims.claims.rule import Reason, Refusal, State
from jobclaims.claims.statements import Rival, claim_statements
from jobclaims.models import JobRun, JobSkip
from jobclaims.testing import race
from jobclaims.time import slots, windows
from jobclaims.time.cron import CronSchedule
from tests.models.test_models import claims_by_inserting_first, pauses_in_the_insert
from tests.support.factories import claim_in_state
from tests.support.helpers import verbs, written_out
from tests.testapp.models import Charge

HOUR = datetime.timedelta(hours=1)
SECOND = datetime.timedelta(seconds=1)
UTC = datetime.timezone.utc


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def test_one_hour_has_one_key_however_its_window_is_spelled():
    moment = at("2026-12-01T20:17:03+00:00")
    keys = {windows.resolve(spec).key_at(moment) for spec in (HOUR, "hourly")}
    assert keys == {"2026-12-01T20:00+00:00"}


def test_a_schedule_that_gains_a_seconds_field_keys_its_fires_as_before():
    fire = at("2026-12-01T20:00+00:00")
    assert CronSchedule("0 20 * * *").key(fire) == CronSchedule("0 0 20 * * *").key(fire)
    assert CronSchedule("30 0 20 * * *").key(fire + 30 * SECOND) == "2026-12-01T20:00:30+00:00"


@override_settings(TIME_ZONE="America/New_York")
@pytest.mark.parametrize(
    ("schedule", "key", "start", "end"),
    [
        ("hourly", "2026-12-01T15:00-05:00", "2026-12-01T20:00Z", "2026-12-01T21:00Z"),
        # A key as fixed windows spelled it before keys were canonical.
        ("3600-second", "2026-12-01T15:00:00-05:00", "2026-12-01T20:00Z", "2026-12-01T21:00Z"),
        # The day the clocks spring forward has 23 hours.
        ("daily", "2026-03-08", "2026-03-08T05:00Z", "2026-03-09T04:00Z"),
        ("monthly", "2026-02", "2026-02-01T05:00Z", "2026-03-01T05:00Z"),
        ("weekly", "2026-W10", "2026-03-02T05:00Z", "2026-03-09T04:00Z"),
        # A fire's slot is the second it names.
        ("5 2 * * *", "2026-12-01T02:05-05:00", "2026-12-01T07:05Z", "2026-12-01T07:05:01Z"),
    ],
)
def test_a_slot_is_the_interval_its_window_covers(schedule, key, start, end):
    assert slots.bounds(schedule, key) == (at(start), at(end))


@pytest.mark.parametrize(("schedule", "key"), [("", "2026-12-01"), ("hourly", "yesterday")])
def test_a_claim_without_a_schedule_or_a_key_that_parses_has_no_slot(schedule, key):
    assert slots.bounds(schedule, key) is None


def claim(
    window: str, schedule: str, *, force: bool = False, allow_overlap: bool = False
) -> JobRun | Refusal:
    return JobRun.objects.try_claim(
        "deployed", window, lease=HOUR, schedule=schedule, force=force, allow_overlap=allow_overlap
    )


@pytest.mark.django_db
def test_a_claim_is_refused_once_another_spelling_of_its_slot_succeeded_unless_forced():
    old = claim("2026-12-01T20:00:00+00:00", "3600-second")
    assert isinstance(old, JobRun)
    old.release()

    refusal = claim("2026-12-01T20:00+00:00", "hourly")

    assert isinstance(refusal, Refusal)
    assert refusal.reason == Reason.SLOT_RAN
    assert str(refusal) == "the 2026-12-01T20:00:00+00:00 run covers the same time and is done"
    assert JobSkip.objects.get().reason == "slot-ran"
    assert isinstance(claim("2026-12-01T20:00+00:00", "hourly", force=True), JobRun)


@pytest.mark.django_db
def test_a_fire_inside_a_window_still_held_is_refused_even_when_overlap_is_allowed():
    daily = claim("2026-12-01", "daily", allow_overlap=True)
    assert isinstance(daily, JobRun)
    refusal = claim("2026-12-01T20:01+00:00", "1 20 * * *", allow_overlap=True)
    assert isinstance(refusal, Refusal)
    assert str(refusal) == "the 2026-12-01 run covers the same time and is still running"


@pytest.mark.django_db
def test_a_failed_run_of_another_spelling_does_not_refuse_the_slot():
    old = claim("2026-12-01T20:00:00+00:00", "3600-second")
    assert isinstance(old, JobRun)
    old.release(JobRun.Status.FAILED, error="boom")
    assert isinstance(claim("2026-12-01T20:00+00:00", "hourly"), JobRun)


@pytest.mark.django_db
def test_the_slot_after_one_that_ran_is_claimed():
    first = claim("2026-12-01", "daily")
    assert isinstance(first, JobRun)
    first.release()
    assert isinstance(claim("2026-12-02T00:00+00:00", "0 0 * * *"), JobRun)


#: Runs of another window against the claim of 20:00 to 21:00: the same
#: hour spelled otherwise, and the hours just before and after it.
PLACES = {
    "overlapping": ("2026-12-01T20:00:00+00:00", "2026-12-01T20:00Z", "2026-12-01T21:00Z"),
    "before": ("2026-12-01T19:00:00+00:00", "2026-12-01T19:00Z", "2026-12-01T20:00Z"),
    "after": ("2026-12-01T21:00:00+00:00", "2026-12-01T21:00Z", "2026-12-01T22:00Z"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("in_a_transaction", [False, True], ids=["its own", "in a transaction"])
def test_the_slot_rule_refuses_the_same_runs_whichever_statement_asks(in_a_transaction):
    # Outside a transaction PostgreSQL's INSERT asks, elsewhere the read
    # before the claim does, and PAUSE_OR_SLOT_SUCCEEDED after it: each states the
    # rule in SQL of its own. One job per state and place.
    for state in State:
        for place, (window, start, end) in PLACES.items():
            claim_in_state(
                state,
                job=f"{state}-{place}",
                window=window,
                schedule="3600-second",
                slot_start=at(start),
                slot_end=at(end),
                holds_job=None,
            )
    refused, after_the_insert = set(), set()
    for state in State:
        for place in PLACES:
            job = f"{state}-{place}"
            with (
                transaction.atomic() if in_a_transaction else contextlib.nullcontext(),
                CaptureQueriesContext(connection) as queries,
            ):
                found = JobRun.objects.try_claim(
                    job, "2026-12-01T20:00+00:00", lease=HOUR, schedule="hourly", allow_overlap=True
                )
            if isinstance(found, Refusal):
                assert found.reason == Reason.SLOT_RAN
                assert found.held_window == PLACES[place][0]
                # Refused before a claim row was written, not given back after.
                assert "DELETE" not in verbs(queries), (state, place)
                refused.add((state, place))
                continue
            JobRun.objects.filter(pk=found.pk).delete()
            with connection.cursor() as cursor:
                if claim_statements(connection).pause_or_slot_succeeded(cursor, found) is not None:
                    after_the_insert.add((state, place))
    # A run of another window covering the slot refuses it while it is held
    # or once it succeeded; after the INSERT, only a success.
    assert refused == {(State.ACTIVE, "overlapping"), (State.SUCCEEDED, "overlapping")}
    assert after_the_insert == set()
    row = JobRun.objects.get(job=f"{State.SUCCEEDED}-overlapping")
    claimed = JobRun(
        job=row.job,
        window="2026-12-01T20:00+00:00",
        slot_start=row.slot_start,
        slot_end=row.slot_end,
    )
    with connection.cursor() as cursor:
        ran = claim_statements(connection).pause_or_slot_succeeded(cursor, claimed)
    assert isinstance(ran, Rival)
    assert (ran.window, ran.status) == (row.window, JobRun.Status.SUCCEEDED)


@pytest.mark.django_db(transaction=True)
def test_a_claim_of_a_slot_reads_its_runs_with_its_pauses_in_one_statement():
    with CaptureQueriesContext(connection) as queries:
        run = claim("2026-12-01T20:00+00:00", "hourly")
        assert isinstance(run, JobRun)
        assert run.release()
    # The runs covering the slot are asked for with the pauses: in the
    # INSERT where it asks for those (PostgreSQL), in the read before it in
    # the same call (MariaDB), else in one read first. After the INSERT, one
    # read for a run of the slot that succeeded meanwhile: on PostgreSQL and
    # MariaDB behind the claim's COMMIT, in the same call.
    if claim_statements(connection).claims_then_reads(connection) and pauses_in_the_insert():
        assert verbs(queries) == ["INSERT", "UPDATE"]
        claimed, after_commit = written_out(queries[0]["sql"]).split("COMMIT;")
        assert "jobclaims_jobpause" in claimed
        assert "slot_end" in claimed
        assert "status = 'succeeded'" in after_commit
    elif claims_by_inserting_first() and pauses_in_the_insert():
        assert verbs(queries) == ["INSERT", "SELECT", "UPDATE"]
        assert "jobclaims_jobpause" in written_out(queries[0]["sql"])
        assert "slot_end" in written_out(queries[0]["sql"])
    elif connection.features.can_return_columns_from_insert:  # SQLite: the rows in the way too.
        assert verbs(queries) == ["SELECT", "SELECT", "INSERT", "SELECT", "UPDATE"]
    else:  # MySQL reads its claim's key and stamps back.
        assert verbs(queries) == ["SELECT", "SELECT", "INSERT", "SELECT", "SELECT", "UPDATE"]
    if not pauses_in_the_insert():
        assert "jobclaims_jobpause" in written_out(queries[0]["sql"])
        assert "slot_end" in written_out(queries[0]["sql"])


def deploy(window: str, schedule: str = "") -> str:
    """Run the job as one deploy of its code declares it; what it did."""
    env = {"DEPLOYED_WINDOW": window, "DEPLOYED_SCHEDULE": schedule}
    (result,) = race("deployed", instances=1, env=env)
    if result.outcome == "skipped":
        assert "succeeded at" in result.stdout, result
    return result.outcome


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("before", "after"),
    [
        (("3600 s", ""), ("hourly", "")),
        (("daily", "0 0 * * *"), ("none", "0 0 * * *")),
        (("none", "0 * * * *"), ("none", "0 0 * * * *")),
    ],
    ids=["respelled", "window-removed", "seconds-field-added"],
)
def test_a_deploy_mid_slot_runs_the_slot_once_in_total(before, after):
    assert deploy(*before) == "ran"
    assert deploy(*after) == "skipped"
    assert Charge.objects.count() == 1


@override_settings(TIME_ZONE="America/New_York")
@pytest.mark.parametrize("spec", ["hourly", "daily", datetime.timedelta(minutes=90)])
def test_a_range_s_slots_are_each_window_once_with_a_moment_in_it(spec):
    # The night New York's clocks fall back: the repeated hour is two windows.
    start, end = at("2026-10-31T22:10-04:00"), at("2026-11-02T03:20-05:00")
    cut = slots.Slots.of_window(spec)
    read = list(cut.through(start, end))
    window = windows.resolve(spec)
    assert [key for _, key in read] == [*window.keys_between(start, end), window.key_at(end)]
    assert all(cut.key_at(moment) == key and start <= moment <= end for moment, key in read)


def test_a_long_range_s_slots_are_read_as_they_are_asked_for():
    start = at("2026-01-01T00:00+00:00")
    cut = slots.Slots.of_window(SECOND)
    # A million one-second windows: the first three come without the rest.
    first = list(itertools.islice(cut.through(start, start + 1_000_000 * SECOND), 3))
    assert [key for _, key in first] == [
        "2026-01-01T00:00+00:00",
        "2026-01-01T00:00:01+00:00",
        "2026-01-01T00:00:02+00:00",
    ]
