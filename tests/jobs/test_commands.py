"""JobCommand, the base class jobs subclass, run in this process."""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

from jobclaims.claims.statements import claim_statements
from jobclaims.jobs.commands import JobCommand
from jobclaims.models import JobRun, JobSkip
from jobclaims.time import windows
from jobclaims.time.clock import database_now
from tests.support.helpers import commands_named, run_command, run_python, unanswered_database_url
from tests.testapp.management.commands.charge_ledger import Command as ChargeLedger
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = "2026-11-29T10:00+00:00"


def test_a_job_runs_once_and_its_claim_is_recorded_succeeded():
    out, err, status = run_command("charge_ledger", "--window", WINDOW)
    assert status == 0, err
    assert "Ran charge_ledger 2026-11-29T10:00+00:00." in out
    run = JobRun.objects.get()
    assert (run.job, run.window, run.status, run.attempt) == (
        "charge_ledger",
        WINDOW,
        JobRun.Status.SUCCEEDED,
        1,
    )
    assert Charge.objects.count() == 1


def test_a_skip_exits_zero_and_says_the_window_already_succeeded():
    run_command("charge_ledger", "--window", WINDOW)
    out, _, status = run_command("charge_ledger", "--window", WINDOW)
    assert status == 0
    assert out.startswith(f"Skipped charge_ledger {WINDOW}: it already succeeded at ")
    assert out.endswith("; pass --force to run it again.\n")
    assert Charge.objects.count() == 1
    # The fix, followed.
    assert run_command("charge_ledger", "--window", WINDOW, "--force")[2] == 0
    assert Charge.objects.count() == 2


def test_a_skip_names_the_holder_and_when_its_lease_ends():
    holder = JobRun.objects.claim("charge_ledger", WINDOW, lease=datetime.timedelta(minutes=5))
    assert holder is not None
    out, _, status = run_command("charge_ledger", "--window", WINDOW)
    assert status == 0
    assert f"held by {holder.owner} until " in out
    assert not Charge.objects.exists()


def test_a_skip_names_the_other_window_that_still_runs():
    JobRun.objects.claim(
        "charge_ledger", "2026-11-29T09:00+00:00", lease=datetime.timedelta(minutes=5)
    )
    out, _, status = run_command("charge_ledger", "--window", WINDOW)
    assert status == 0
    assert "the 2026-11-29T09:00+00:00 run" in out
    assert out.endswith("is still running; set allow_overlap = True to let windows overlap.\n")

    # The fix, followed.
    class Overlapping(ChargeLedger):
        job_name = "charge_ledger"
        allow_overlap = True

    call_command(Overlapping(stdout=StringIO()), "--window", WINDOW)
    assert Charge.objects.get().window == WINDOW


def test_force_runs_a_succeeded_window_again():
    run_command("charge_ledger", "--window", WINDOW)
    _, err, status = run_command("charge_ledger", "--window", WINDOW, "--force")
    assert status == 0, err
    assert JobRun.objects.get().attempt == 2
    assert Charge.objects.count() == 2


def test_a_job_that_raises_exits_non_zero_and_keeps_the_traceback():
    with pytest.raises(RuntimeError, match="payment provider is down"):
        call_command("charge_ledger", "--window", WINDOW, "--fail", stdout=None)
    run = JobRun.objects.get()
    assert run.status == JobRun.Status.FAILED
    assert run.error.startswith("RuntimeError: the payment provider is down\n\nTraceback")
    assert run.finished_at is not None


def test_without_window_the_current_window_comes_from_the_database_clock():
    hourly = windows.resolve("hourly")
    before = hourly.key_at(database_now())
    run_command("charge_ledger")
    after = hourly.key_at(database_now())
    assert JobRun.objects.get().window in {before, after}


def test_the_lease_option_sets_the_claims_lease():
    run_command("charge_ledger", "--window", WINDOW, "--lease", "90")
    run = JobRun.objects.get()
    assert run.expires_at - run.claimed_at == datetime.timedelta(seconds=90)


@pytest.mark.parametrize(
    ("lease", "message"),
    [
        ("0", "the lease must be above 0 seconds, not 0"),
        ("-5", "the lease must be above 0 seconds, not -5"),
        ("nan", "the lease must be above 0 seconds, not nan"),
        ("1e-9", "the lease must be above 0 seconds, not 1e-9"),
        ("0.05", "the lease is 0:00:00.050000, shorter than the 0.1 s a lease must last: "),
        ("soon", "'soon' is not a number of seconds"),
        ("31622401", "the lease must be at most 31622400 seconds (366 days), not 31622401; "),
        ("300000000000", "the lease must be at most 31622400 seconds (366 days), not 300000000000"),
        ("1e300", "the lease must be at most 31622400 seconds (366 days), not 1e300"),
        ("inf", "the lease must be at most 31622400 seconds (366 days), not inf"),
    ],
)
def test_a_bad_lease_is_refused_and_nothing_is_written(lease, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        ChargeLedger().run_from_argv(["manage.py", "charge_ledger", "--lease", lease])
    assert exit_.value.code == 2
    assert f"argument --lease: {message}" in capsys.readouterr().err
    assert not JobRun.objects.exists()
    assert not JobSkip.objects.exists()


def test_the_longest_lease_is_stored_and_read_back_exactly():
    _, err, status = run_command("charge_ledger", "--window", WINDOW, "--lease", "31622400")
    assert status == 0, err
    run = JobRun.objects.get()
    assert run.expires_at - run.claimed_at == datetime.timedelta(days=366)


class YearLongLease(ChargeLedger):
    lease = datetime.timedelta(days=367)


class ZeroLease(ChargeLedger):
    lease = datetime.timedelta(0)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (YearLongLease, r"test_commands: lease is 367 days, 0:00:00, longer than the 366 days"),
        (ZeroLease, r"test_commands: lease must be a positive datetime\.timedelta"),
    ],
)
def test_a_job_class_with_a_lease_out_of_bounds_is_refused_and_nothing_is_written(command, message):
    with pytest.raises(CommandError, match=message):
        call_command(command(), "--window", WINDOW)
    assert not JobRun.objects.exists()
    assert not JobSkip.objects.exists()


@override_settings(JOBCLAIMS={"DEFAULT_LEASE": datetime.timedelta(days=400)})
def test_a_default_lease_setting_out_of_bounds_is_refused_and_nothing_is_written():
    with pytest.raises(ImproperlyConfigured, match=r"DEFAULT_LEASE'\] is 400 days"):
        call_command("charge_ledger", "--window", WINDOW)
    assert not JobRun.objects.exists()
    assert not JobSkip.objects.exists()


def test_a_bad_window_option_is_refused_with_an_example_and_nothing_is_written():
    _, err, status = run_command("charge_ledger", "--window", "tomorrow")
    assert status == 1
    assert "--window: 'tomorrow' is not a valid hourly window; write it like" in err
    assert not JobRun.objects.exists()


class UnknownWindow(ChargeLedger):
    window = "fortnightly"


class LongName(ChargeLedger):
    job_name = "j" * 201


class NoRunJob(JobCommand):
    pass


def test_an_unknown_window_spec_names_the_choices_and_nothing_is_written():
    # Named by its command, as manage.py knows it: this module's name.
    with pytest.raises(CommandError, match=r"^test_commands: unknown window 'fortnightly'"):
        call_command(UnknownWindow())
    assert not JobRun.objects.exists()


def test_an_overlong_job_name_is_refused_and_nothing_is_written():
    with pytest.raises(CommandError, match="shorten it to at most 200"):
        call_command(LongName(), "--window", WINDOW)
    assert not JobRun.objects.exists()


def test_a_job_without_run_job_says_what_to_write():
    with pytest.raises(NotImplementedError, match="must provide a run_job"):
        call_command(NoRunJob(), "--window", "2026-11-29T10:25")
    assert JobRun.objects.get().status == JobRun.Status.FAILED


class MaxRunTimeInSeconds(ChargeLedger):
    max_run_time = 3600  # type: ignore[assignment]


def test_a_max_run_time_that_is_not_a_timedelta_is_refused_and_nothing_is_written():
    with pytest.raises(CommandError, match=r"max_run_time must be a positive datetime\.timedelta"):
        call_command(MaxRunTimeInSeconds(), "--window", WINDOW)
    assert not JobRun.objects.exists()


def test_a_database_without_the_jobclaims_tables_names_the_migrate_command():
    job_names_the_migrate_command_and_runs_once_it_is_followed(migrated_to="zero")


def test_a_postgresql_database_migrated_before_the_claim_functions_names_the_migrate_command():
    # PostgreSQL's claim is a function of migration 0002: a project that
    # upgraded jobclaims without migrating is told to, and nothing runs.
    if connection.vendor != "postgresql":
        pytest.skip("only PostgreSQL's claim is a function of its own")
    job_names_the_migrate_command_and_runs_once_it_is_followed(migrated_to="0001")


def test_a_database_migrated_before_the_claim_procedure_names_the_migrate_command():
    # The claim is one call of a procedure, of migration 0003 on PostgreSQL
    # and 0004 on MariaDB: a database migrated up to the one before cannot
    # take it.
    if not claim_statements(connection).claims_then_reads(connection):
        pytest.skip("SQLite's claim calls no procedure")
    before = {"postgresql": "0002", "mysql": "0003"}[connection.vendor]
    job_names_the_migrate_command_and_runs_once_it_is_followed(migrated_to=before)


def job_names_the_migrate_command_and_runs_once_it_is_followed(migrated_to: str) -> None:
    """With jobclaims migrated only to ``migrated_to``, a job names the
    migrate command and writes nothing; the fix, followed, lets it run."""
    call_command("migrate", "jobclaims", migrated_to, verbosity=0)
    try:
        _, err, status = run_command("charge_ledger", "--window", WINDOW)
        assert status == 1
        assert "run: manage.py migrate jobclaims" in err
        assert not Charge.objects.exists()
        if migrated_to != "zero":  # The claims table is there to read.
            assert not JobRun.objects.exists()
        [migrate] = commands_named(err)
        call_command(*migrate, verbosity=0)
        assert run_command("charge_ledger", "--window", WINDOW)[2] == 0
    finally:
        call_command("migrate", "jobclaims", verbosity=0)
    assert Charge.objects.count() == 1


@pytest.mark.django_db(transaction=True, databases=["default", "replica"])
@override_settings(JOBCLAIMS={"DATABASE": "replica"})
def test_the_migrate_command_named_for_claims_kept_elsewhere_names_their_database():
    # "replica" is the test database under another alias: unmigrating one unmigrates both.
    call_command("migrate", "jobclaims", "zero", verbosity=0)
    try:
        _, err, status = run_command("charge_ledger", "--window", WINDOW)
    finally:
        call_command("migrate", "jobclaims", verbosity=0)
    assert status == 1
    assert (
        "not applied to the 'replica' database; run: manage.py migrate jobclaims --database replica"
        in err
    )


class SubSecondWindow(JobCommand):
    window = datetime.timedelta(seconds=1.5)


def test_a_window_of_a_fraction_of_a_second_is_refused_and_nothing_is_written():
    with pytest.raises(CommandError, match=r"test_commands: window .* whole number of seconds"):
        call_command(SubSecondWindow())
    assert not JobRun.objects.exists()


def test_at_verbosity_zero_a_run_prints_only_what_run_job_prints():
    out, err, status = run_command("charge_ledger", "--window", WINDOW, "-v", "0")
    assert (out, err, status) == ("charging as attempt 1\n", "", 0)


def test_at_verbosity_zero_a_skip_prints_nothing():
    run_command("charge_ledger", "--window", WINDOW)
    out, err, status = run_command("charge_ledger", "--window", WINDOW, "-v", "0")
    assert (out, err, status) == ("", "", 0)
    assert JobSkip.objects.get().reason == JobSkip.Reason.SUCCEEDED


def test_at_verbosity_zero_a_failure_still_raises_and_is_recorded():
    with pytest.raises(RuntimeError, match="the payment provider is down"):
        call_command("charge_ledger", "--window", WINDOW, "--fail", "-v", "0", stdout=StringIO())
    assert JobRun.objects.get().status == JobRun.Status.FAILED


def test_a_job_with_its_database_down_says_so_in_one_line_and_runs_nothing():
    # A real process from cron: no check may open the connection before the
    # claim does (Django 6.1 runs the database's checks for every command).
    done = run_python(
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(['manage.py', 'charge_ledger'])",
        env={"DATABASE_URL": unanswered_database_url(), "PYTHONPATH": os.getcwd()},
    )
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("CommandError: Could not claim charge_ledger"), line
    assert "so nothing ran" in line


def test_a_stop_that_comes_once_the_job_returned_waits_for_its_success_to_be_recorded(
    monkeypatch,
):
    # Failed when a SIGTERM between run_job()'s return and the release (here,
    # as the output's tee closes) ended the finished run as interrupted, for
    # another host to run again.
    from jobclaims.jobs import commands

    real = commands.teeing

    @contextlib.contextmanager
    def stopped_on_the_way_out(*args: object, **kwargs: object) -> Iterator[None]:
        with real(*args, **kwargs):  # type: ignore[arg-type]
            yield
        os.kill(os.getpid(), signal.SIGTERM)  # Handled at once: before the release.

    monkeypatch.setattr(commands, "teeing", stopped_on_the_way_out)
    with pytest.raises(CommandError) as stopped:
        call_command("charge_ledger", "--window", WINDOW, verbosity=0)
    assert stopped.value.returncode == 128 + signal.SIGTERM
    assert "it had finished, and its success is recorded" in str(stopped.value)
    assert JobRun.objects.get().status == JobRun.Status.SUCCEEDED
    assert Charge.objects.count() == 1
