"""The rules a claim follows, exercised through JobRun.objects.claim()."""

from __future__ import annotations

import datetime
import subprocess
import sys
from contextlib import nullcontext
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from jobclaims.claims.statements import claim_statements
from jobclaims.models import JobRun, JobSkip
from jobclaims.time.clock import database_now
from tests.support.factories import stored_with_skips
from tests.support.helpers import verbs, written_out

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = datetime.timedelta(minutes=5)


def claim(window: str = "2026-11-29", **kwargs: Any) -> JobRun | None:
    return JobRun.objects.claim("charge", window, lease=kwargs.pop("lease", LEASE), **kwargs)


def held(window: str = "2026-11-29", **kwargs: Any) -> JobRun:
    """A claim the test goes on to use: refused, it fails the test here."""
    run = claim(window, **kwargs)
    assert run is not None, f"the claim of {window} was refused"
    return run


def test_first_claim_of_a_window_is_attempt_one_with_a_lease_from_the_database_clock():
    before = database_now()
    run = claim()
    after = database_now()
    assert run is not None
    assert (run.job, run.window, run.status, run.attempt) == (
        "charge",
        "2026-11-29",
        JobRun.Status.RUNNING,
        1,
    )
    assert before <= run.claimed_at <= after
    assert run.expires_at - run.claimed_at == LEASE
    assert JobRun.objects.get() == run


def claims_by_inserting_first() -> bool:
    """Where a claim starts with its INSERT: rows are locked one by one (not
    SQLite, whose INSERT locks the whole file), and INSERT returns rows (not
    MySQL)."""
    features = connection.features
    return features.has_select_for_update and features.can_return_columns_from_insert


def pauses_in_the_insert() -> bool:
    """Where the claim's first INSERT asks for the job's pauses itself
    (PostgreSQL; MariaDB's would take the table's AUTO-INC lock)."""
    return claim_statements(connection).checks_refusals_in_insert(connection)


def test_a_first_claim_and_its_release_read_the_pauses_before_and_after_the_claim_commits():
    with CaptureQueriesContext(connection) as queries:
        held().release()
    # Every claim first asks whether its job is paused: in its INSERT where
    # that INSERT can ask (PostgreSQL), else in a read of its own. A claim
    # without a slot asks once more after its commit, for a pause that
    # committed meanwhile (a slot's claim asks in its read of the slot):
    # on PostgreSQL and MariaDB behind the INSERT and its COMMIT, in the
    # same round trip.
    assert "jobclaims_jobpause" in written_out(queries[0]["sql"])
    assert "jobclaims_jobpause" in written_out(queries[-2]["sql"])
    if claim_statements(connection).claims_then_reads(connection):
        claimed = written_out(queries[-2]["sql"])
        assert verbs(queries)[-2:] == ["INSERT", "UPDATE"]
        assert len(queries) == 2 if pauses_in_the_insert() else 3
        _, after_commit = claimed.split("COMMIT;")
        assert "jobclaims_jobpause" in after_commit
    elif claims_by_inserting_first() and pauses_in_the_insert():
        assert verbs(queries) == ["INSERT", "SELECT", "UPDATE"]
    elif claims_by_inserting_first():
        assert verbs(queries)[1:] == ["INSERT", "SELECT", "UPDATE"]
    elif connection.features.can_return_columns_from_insert:  # SQLite: a read first.
        assert verbs(queries)[1:] == ["SELECT", "INSERT", "SELECT", "UPDATE"]
    else:  # MySQL: the INSERT cannot return the claim's key and clock stamps.
        assert verbs(queries)[1:] == ["SELECT", "INSERT", "SELECT", "SELECT", "UPDATE"]


def test_a_first_claim_inside_a_transaction_reads_first():
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        held()
    # The pause read, then the claim's own.
    assert verbs(queries)[:3] == ["SELECT", "SELECT", "SAVEPOINT"]


def test_second_claim_is_refused_while_the_lease_holds_and_changes_nothing():
    run = held()
    assert claim() is None
    stored = JobRun.objects.get()
    assert (stored.token, stored.owner, stored.attempt) == (run.token, run.owner, 1)


def test_a_refused_claim_writes_no_claim_row_and_records_its_skip_with_one_insert():
    claim()
    with CaptureQueriesContext(connection) as queries:
        assert claim() is None
    if claims_by_inserting_first() and pauses_in_the_insert():
        # The INSERT that claims a new window does nothing on a taken one;
        # then the pause read, the read of the row in the way, the skip.
        assert verbs(queries) == ["INSERT", "SELECT", "SELECT", "INSERT"]
    elif claims_by_inserting_first():  # After the pause read:
        assert verbs(queries)[1:] == ["INSERT", "SELECT", "INSERT"]
    else:  # After the pause read:
        assert verbs(queries)[1:] == ["SELECT", "INSERT"]
    assert "jobclaims_jobskip" in queries[-1]["sql"]
    assert JobRun.objects.get().attempt == 1
    assert JobSkip.objects.get().reason == JobSkip.Reason.HELD


def test_a_claim_whose_insert_is_refused_by_a_row_it_may_take_over_records_no_skip():
    failed = held()
    failed.release(JobRun.Status.FAILED)
    retried = held()
    assert (retried.pk, retried.attempt) == (failed.pk, 2)
    assert not JobSkip.objects.exists()


def test_skips_are_counted_per_claim_with_the_time_of_the_last():
    run = held()
    claim()
    claim()
    stored = stored_with_skips()
    assert stored.skips == 2
    last = JobSkip.objects.latest("skipped_at")
    assert stored.last_skipped_at == last.skipped_at
    assert (last.owner, last.reason) == (run.owner, JobSkip.Reason.HELD)


def test_a_takeover_starts_its_own_skip_count():
    crashed = held()
    claim()
    JobRun.objects.filter(pk=crashed.pk).expire()
    claim()
    assert stored_with_skips().skips == 0
    assert stored_with_skips().last_skipped_at is None


def test_skips_give_their_reason():
    claim("08:00")
    claim("09:00")
    JobRun.objects.filter(window="08:00").update(status=JobRun.Status.SUCCEEDED, holds_job=None)
    claim("08:00")
    assert list(JobSkip.objects.order_by("pk").values_list("window", "reason")) == [
        ("09:00", JobSkip.Reason.OVERLAP),
        ("08:00", JobSkip.Reason.SUCCEEDED),
    ]


@pytest.mark.parametrize("in_transaction", [False, True], ids=["alone", "in a transaction"])
def test_a_window_held_by_its_own_run_gives_held_even_where_that_run_holds_the_job(
    in_transaction: bool,
):
    # The window's row both holds the window and holds the job: one reason.
    held("08:00")
    with transaction.atomic() if in_transaction else nullcontext():
        assert claim("08:00") is None
    assert list(JobSkip.objects.values_list("reason", flat=True)) == [JobSkip.Reason.HELD]


def test_the_window_s_own_refusal_is_given_before_another_window_s():
    claim("08:00")
    JobRun.objects.filter(window="08:00").update(status=JobRun.Status.SUCCEEDED, holds_job=None)
    held("09:00")
    assert claim("08:00") is None
    assert JobSkip.objects.get().reason == JobSkip.Reason.SUCCEEDED


def test_a_window_that_succeeded_is_not_run_again():
    held().release()
    assert claim() is None


def test_force_runs_a_succeeded_window_again_as_a_new_attempt():
    first = held()
    first.release()
    again = claim(force=True)
    assert again is not None
    assert again.attempt == 2
    assert again.token != first.token
    assert again.status == JobRun.Status.RUNNING


def test_force_does_not_take_a_window_from_a_live_holder():
    claim()
    assert claim(force=True) is None


def test_a_failed_window_is_retried_by_the_next_claim():
    held().release(JobRun.Status.FAILED, error="Traceback: boom")
    retry = claim()
    assert retry is not None
    assert retry.attempt == 2
    assert JobRun.objects.get().error == ""


def test_an_expired_claim_is_taken_over_and_the_old_holder_cannot_release_it():
    crashed = held()
    assert JobRun.objects.filter(pk=crashed.pk).expire() == 1
    successor = claim()
    assert successor is not None
    assert successor.attempt == 2
    assert successor.token != crashed.token
    assert crashed.release() is False
    stored = JobRun.objects.get()
    assert (stored.status, stored.token) == (JobRun.Status.RUNNING, successor.token)
    assert successor.release() is True


def test_a_renewal_extends_the_lease_from_now_by_the_database_clock():
    run = held()
    before = database_now()
    assert run.renew(datetime.timedelta(minutes=20)) is True
    stored = JobRun.objects.get()
    assert stored.expires_at == run.expires_at
    assert before + datetime.timedelta(minutes=20) <= stored.expires_at


def test_a_renewal_never_revives_a_lease_an_operator_expired():
    run = held()
    JobRun.objects.expire()
    assert run.renew(LEASE) is False
    assert JobRun.objects.expired().get() == run
    successor = claim()
    assert successor is not None
    assert successor.attempt == 2


def test_a_renewal_extends_the_lease_no_further_than_it_is_told():
    run = held()
    until = run.claimed_at + datetime.timedelta(minutes=7)
    assert run.renew(datetime.timedelta(minutes=20), until=until) is True
    assert JobRun.objects.get().expires_at == until


def test_a_claim_is_released_once():
    run = held()
    assert run.release() is True
    assert run.release(JobRun.Status.FAILED) is False
    assert JobRun.objects.get().status == JobRun.Status.SUCCEEDED


def test_release_records_the_outcome_with_the_database_clock():
    run = held()
    run.release(JobRun.Status.FAILED, error="Traceback: boom")
    stored = JobRun.objects.get()
    assert (stored.status, stored.error) == (JobRun.Status.FAILED, "Traceback: boom")
    assert run.finished_at == stored.finished_at
    assert stored.finished_at is not None
    assert stored.claimed_at <= stored.finished_at <= database_now()


def test_release_refuses_running_as_an_outcome():
    run = held()
    with pytest.raises(ValueError, match="succeeded, failed or timed-out"):
        run.release(JobRun.Status.RUNNING)


def test_another_window_waits_while_the_job_is_held():
    holder = held("2026-11-29T08:00")
    assert claim("2026-11-29T09:00") is None
    holder.release()
    assert claim("2026-11-29T09:00") is not None


def test_allow_overlap_lets_windows_of_one_job_run_together():
    assert claim("2026-11-29T08:00", allow_overlap=True) is not None
    assert claim("2026-11-29T09:00", allow_overlap=True) is not None


def test_a_dead_holder_of_another_window_does_not_block_the_job():
    dead = held("2026-11-29T08:00")
    JobRun.objects.filter(pk=dead.pk).expire()
    fresh = claim("2026-11-29T09:00")
    assert fresh is not None
    assert JobRun.objects.expired().get().window == "2026-11-29T08:00"
    assert claim("2026-11-29T10:00") is None


def test_other_jobs_are_independent():
    assert claim() is not None
    assert JobRun.objects.claim("send_reports", "2026-11-29", lease=LEASE) is not None


def test_active_and_expired_are_judged_by_the_database_clock():
    live = claim("a")
    dead = held("b", allow_overlap=True)
    JobRun.objects.filter(pk=dead.pk).expire()
    done = held("c", allow_overlap=True)
    done.release()
    assert list(JobRun.objects.active()) == [live]
    assert list(JobRun.objects.expired()) == [dead]
    assert list(JobRun.objects.finished()) == [done]


@pytest.mark.parametrize(
    ("job", "window", "lease", "message"),
    [
        ("", "w", LEASE, "needs a job name"),
        ("x" * 201, "w", LEASE, "shorten it to at most 200"),
        ("charge", "", LEASE, "needs a window name"),
        ("charge", "w" * 65, LEASE, "shorten it to at most 64"),
        ("char\x00ge", "w", LEASE, "contains a NUL character; remove it"),
        ("charge", "w", datetime.timedelta(0), "positive datetime.timedelta"),
        ("charge", "w", datetime.timedelta(seconds=-1), "positive datetime.timedelta"),
        ("charge", "w", 60, "positive datetime.timedelta"),
        ("charge", "w", datetime.timedelta(days=367), "longer than the 366 days"),
        ("charge", "w", datetime.timedelta.max, "longer than the 366 days a lease may last"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(job, window, lease, message):
    with pytest.raises(ValueError, match=message):
        JobRun.objects.claim(job, window, lease=lease)
    assert not JobRun.objects.exists()
    assert not JobSkip.objects.exists()


def test_an_overlong_schedule_is_refused_rather_than_cut_short():
    with pytest.raises(ValueError, match="shorten it to at most 32"):
        claim(schedule="every " + "9" * 40 + " seconds")
    assert not JobRun.objects.exists()


def test_an_overlong_owner_is_refused_rather_than_cut_short():
    with pytest.raises(ValueError, match="shorten it to at most 255"):
        JobRun.objects.try_claim("charge", "w", lease=LEASE, owner="worker task " + "x" * 250)
    assert not JobRun.objects.exists()


def test_a_named_owner_is_the_claims_holder():
    run = JobRun.objects.try_claim("charge", "w", lease=LEASE, owner="host:1:ab task 42")
    assert isinstance(run, JobRun)
    assert run.owner == JobRun.objects.get().owner == "host:1:ab task 42"


def test_a_claim_inside_a_failing_transaction_leaves_the_outer_one_usable():
    claim()
    with transaction.atomic():
        assert claim() is None
        assert JobRun.objects.count() == 1


@pytest.fixture
def second_connection():
    """Another session on the test database, like another instance's."""
    from django.db import connections

    other = connections.create_connection("default")
    yield other
    other.close()


@pytest.fixture
def no_waiting():
    """Make any statement of this session that waits 2 s fail the test.

    A statement timeout, not a lock timeout: claim() answers a lock
    timeout by reading instead, which would hide the wait.
    """
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite has no row locks; the process races cover it")
    limit = {
        "postgresql": ("statement_timeout", "'2s'", "DEFAULT"),
        "mysql": ("max_statement_time", "2", "DEFAULT"),
    }
    variable, seconds, default = limit[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(f"SET SESSION {variable} = {seconds}")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"SET SESSION {variable} = {default}")


def session_settings() -> tuple[str, ...]:
    """The settings a claim changes for its own statements only."""
    if connection.vendor == "postgresql":
        query = "SELECT current_setting('lock_timeout'), current_setting('synchronous_commit')"
    else:
        query = "SELECT @@innodb_lock_wait_timeout"
    with connection.cursor() as cursor:
        cursor.execute(query)
        return tuple(str(value) for value in cursor.fetchone())


@pytest.mark.usefixtures("no_waiting")
def test_a_claim_and_a_skip_leave_the_sessions_settings_as_they_were():
    before = session_settings()
    held("08:00", allow_overlap=True)
    assert claim("08:00") is None
    assert JobSkip.objects.count() == 1
    with transaction.atomic():
        held("09:00", allow_overlap=True)
        assert claim("09:00") is None
        assert session_settings() == before
    assert session_settings() == before


@pytest.mark.usefixtures("no_waiting")
def test_a_contender_skips_at_once_while_the_holder_writes_in_a_fenced_block(second_connection):
    run = held()
    second_connection.set_autocommit(False)
    with second_connection.cursor() as cursor:
        # What run.fenced() sends as it enters, in the holder's session.
        cursor.execute(
            f"UPDATE {JobRun._meta.db_table} SET status = status WHERE id = %s", [run.pk]
        )
        assert claim() is None
    second_connection.rollback()
    assert JobSkip.objects.get().reason == JobSkip.Reason.HELD


@pytest.mark.usefixtures("no_waiting")
def test_in_repeatable_read_a_contender_still_skips_at_once_past_a_fenced_holder(
    second_connection,
):
    # A project may choose REPEATABLE READ (DATABASES OPTIONS
    # "isolation_level"), where reads and locks differ from Django's default.
    isolation = {
        "postgresql": "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "mysql": "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    }
    run = held()
    with connection.cursor() as cursor:
        cursor.execute(isolation[connection.vendor])
    second_connection.set_autocommit(False)
    try:
        with second_connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {JobRun._meta.db_table} SET status = status WHERE id = %s", [run.pk]
            )
            assert claim() is None
    finally:
        second_connection.rollback()
        connection.close()  # The next connection has Django's isolation level.
    assert JobSkip.objects.get().reason == JobSkip.Reason.HELD


@pytest.mark.usefixtures("no_waiting")
def test_a_contender_skips_a_window_another_session_is_taking_over(second_connection):
    crashed = held()
    JobRun.objects.filter(pk=crashed.pk).expire()
    second_connection.set_autocommit(False)
    window = connection.ops.quote_name("window")
    with second_connection.cursor() as cursor:
        # Through the unique index, as a takeover locks it.
        cursor.execute(
            f"SELECT id FROM {JobRun._meta.db_table} WHERE job = %s AND {window} = %s FOR UPDATE",
            [crashed.job, crashed.window],
        )
        assert claim() is None
    second_connection.rollback()
    assert held().attempt == 2


# A project of its own, in a process of its own: the fix the message names,
# followed, makes the job run.
_PROJECT = """
import sys
import django
from django.conf import settings
from django.core.management import call_command

apps = ["django.contrib.contenttypes", "django.contrib.auth"]
settings.configure(
    INSTALLED_APPS=apps + sys.argv[2:],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": sys.argv[1]}},
    USE_TZ=True,
)
django.setup()
if sys.argv[2:]:
    call_command("migrate", "jobclaims", verbosity=0)
from jobclaims import JobCommand


class Command(JobCommand):
    window = "daily"

    def run_job(self, run, *args, **options):
        print("charged", run.window)


call_command(Command(), verbosity=0)
"""


def test_jobclaims_left_out_of_installed_apps_names_the_setting_and_the_migrate(tmp_path):
    database = str(tmp_path / "project.sqlite3")
    left_out = subprocess.run(
        [sys.executable, "-c", _PROJECT, database], capture_output=True, text=True, check=False
    )
    assert left_out.returncode == 1
    assert left_out.stderr.splitlines()[-1] == (
        "django.core.exceptions.ImproperlyConfigured: jobclaims is not in INSTALLED_APPS: "
        'add "jobclaims" to INSTALLED_APPS in your settings, then run: manage.py migrate jobclaims'
    )
    followed = subprocess.run(
        [sys.executable, "-c", _PROJECT, database, "jobclaims"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.startswith("charged ")
