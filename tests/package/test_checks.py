from __future__ import annotations

import datetime
import os
import subprocess
import sys
from io import StringIO
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.apps import apps
from django.core.checks import CheckMessage
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection, connections
from django.test import override_settings

from jobclaims import checks
from jobclaims.jobs import discovery
from jobclaims.models import JobRun
from jobclaims.testing import assert_ran_once, child_environment
from jobclaims.time import leases
from tests.testapp.management.commands.charge_ledger import Command as ChargeLedger

REPLICA_WRITES = override_settings(DATABASE_ROUTERS=["tests.support.routers.WritesToReplicaRouter"])
PRIMARY_WRITES = override_settings(DATABASE_ROUTERS=["tests.support.routers.ReadReplicaRouter"])


def ids(messages: list[CheckMessage]) -> list[str | None]:
    return [message.id for message in messages]


def hint(message: CheckMessage) -> str:
    return message.hint or ""


def test_no_jobclaims_setting_passes_the_settings_check():
    assert checks.check_settings() == []


@override_settings(
    JOBCLAIMS={
        "DEFAULT_LEASE": datetime.timedelta(minutes=5),
        "DATABASE": "default",
        "CLOCK_SKEW_WARNING": datetime.timedelta(seconds=5),
        "HEALTH_GRACE": {"charge_invoices": datetime.timedelta(hours=3)},
        "METRICS_TEXTFILE": "/var/lib/node_exporter/textfile/jobclaims.prom",
    }
)
def test_every_key_set_to_a_valid_value_passes_the_settings_check():
    assert checks.check_settings() == []


@override_settings(JOBCLAIMS={"DEFAULT_LEASE": 600})
def test_a_lease_given_as_a_number_is_error_e003_asking_for_a_timedelta():
    [error] = checks.check_settings()
    assert error.id == "jobclaims.E003"
    assert error.msg == (
        "JOBCLAIMS['DEFAULT_LEASE'] must be a positive datetime.timedelta, not 600"
    )
    assert "https://jobclaims.readthedocs.io/en/stable/settings.html lists every key" in hint(error)


@override_settings(JOBCLAIMS={"DEFAULT_LEASE": datetime.timedelta(days=367)})
def test_a_default_lease_longer_than_a_lease_may_last_is_error_e003_naming_the_fix():
    [error] = checks.check_settings()
    assert error.id == "jobclaims.E003"
    assert error.msg.startswith(
        "JOBCLAIMS['DEFAULT_LEASE'] is 367 days, 0:00:00, longer than the 366 days "
        "a lease may last; the heartbeat renews a lease while its job runs"
    )


@override_settings(JOBCLAIMS={"CLOCK_SKEW_WARNING": datetime.timedelta()})
def test_a_zero_clock_skew_warning_is_error_e003():
    assert ids(checks.check_settings()) == ["jobclaims.E003"]


@override_settings(JOBCLAIMS={"LEASE": datetime.timedelta(minutes=5)})
def test_a_misspelt_key_is_error_e003_listing_the_known_keys():
    [error] = checks.check_settings()
    assert error.id == "jobclaims.E003"
    assert "unknown key 'LEASE'" in error.msg
    assert "DEFAULT_LEASE, DATABASE, CLOCK_SKEW_WARNING, STANDBY_TIMEOUT" in error.msg


@override_settings(JOBCLAIMS={"DATABASE": "claims"})
def test_a_database_alias_missing_from_databases_is_error_e003():
    [error] = checks.check_settings()
    assert error.id == "jobclaims.E003"
    assert "'claims', which is not in DATABASES" in error.msg


@override_settings(JOBCLAIMS=[("DATABASE", "default")])
def test_a_jobclaims_setting_that_is_not_a_dict_is_error_e003():
    [error] = checks.check_settings()
    assert error.msg == "JOBCLAIMS must be a dict, not list"


@override_settings(USE_TZ=False)
def test_use_tz_off_is_error_e001():
    [error] = checks.check_use_tz()
    assert error.id == "jobclaims.E001"
    assert hint(error).startswith("Set USE_TZ = True (Django's default). See https://")


def test_use_tz_on_passes():
    assert checks.check_use_tz() == []


@override_settings(USE_TZ=False)
def test_checking_another_app_leaves_the_jobclaims_checks_out():
    assert checks.check_use_tz(app_configs=[apps.get_app_config("auth")]) == []
    assert ids(checks.check_use_tz(app_configs=[apps.get_app_config("jobclaims")])) == [
        "jobclaims.E001"
    ]


@PRIMARY_WRITES
def test_a_router_that_reads_from_a_replica_and_writes_to_the_primary_passes():
    assert checks.check_claims_database_is_the_primary() == []


@REPLICA_WRITES
def test_claims_a_router_sends_to_a_replica_are_error_e002():
    [error] = checks.check_claims_database_is_the_primary()
    assert error.id == "jobclaims.E002"
    assert "the 'replica' database, which is a replica of 'default'" in error.msg
    assert "JOBCLAIMS['DATABASE'] = 'default'" in hint(error)


@pytest.fixture
def a_second_database(monkeypatch):
    """ "replica" as a database of its own, not a mirror of "default"."""
    monkeypatch.setitem(connections["replica"].settings_dict, "TEST", {})


def claims_database_checks() -> list[CheckMessage]:
    return [
        *checks.check_claims_database_is_the_primary(),
        *checks.check_claims_tables_can_be_migrated(),
    ]


@override_settings(JOBCLAIMS={"DATABASE": "replica"})
def test_a_claims_database_set_without_a_router_passes(a_second_database):
    assert claims_database_checks() == []


@override_settings(
    JOBCLAIMS={"DATABASE": "replica"},
    DATABASE_ROUTERS=["tests.support.routers.ClaimsApartRouter"],
)
def test_a_claims_database_set_where_the_router_sends_and_migrates_job_runs_passes(
    a_second_database,
):
    assert claims_database_checks() == []


@PRIMARY_WRITES
@override_settings(JOBCLAIMS={"DATABASE": "replica"})
def test_a_claims_database_set_apart_from_the_routers_writes_passes_e002(a_second_database):
    # jobclaims reads claims back from JOBCLAIMS["DATABASE"] too: no split.
    assert checks.check_claims_database_is_the_primary() == []


@PRIMARY_WRITES
@override_settings(JOBCLAIMS={"DATABASE": "replica"})
def test_a_claims_database_the_router_will_not_migrate_jobclaims_on_is_error_e006(
    a_second_database,
):
    [error] = checks.check_claims_tables_can_be_migrated()
    assert error.id == "jobclaims.E006"
    assert "'manage.py migrate jobclaims --database replica' would not create" in error.msg
    assert "allow_migrate() return True for app_label 'jobclaims' on 'replica'" in hint(error)


def test_jobs_with_claims_on_the_jobclaims_database_and_no_router_run_once(race_command):
    # Real processes: a job's command runs the system checks before it claims.
    results = race_command(
        "charge_ledger", "--window", "2026-11-29T10:00", env={"TESTS_CLAIMS_ALIAS": "claims"}
    )
    assert_ran_once(results)
    assert JobRun.objects.get().job == "charge_ledger"


@REPLICA_WRITES
@override_settings(JOBCLAIMS={"DATABASE": "replica"})
def test_claims_database_set_to_a_replica_is_error_e002_even_when_routed_there():
    [error] = checks.check_claims_database_is_the_primary()
    assert error.id == "jobclaims.E002"
    assert "replica of 'default'" in error.msg


@override_settings(JOBCLAIMS={"DATABASE": "claims"})
def test_checks_that_need_the_settings_leave_a_bad_setting_to_e003():
    assert checks.check_claims_database_is_the_primary() == []
    assert checks.check_row_locks() == []
    assert checks.check_claims_database_backend() == []


def test_a_database_without_row_locks_is_warning_w001():
    expected = [] if connection.features.has_select_for_update else ["jobclaims.W001"]
    assert ids(checks.check_row_locks()) == expected


def test_w001_recommends_immediate_transactions_and_a_busy_timeout_until_both_are_set(
    monkeypatch,
):
    if connection.features.has_select_for_update:
        pytest.skip("this database locks rows, so W001 does not apply to it")
    [warning] = checks.check_row_locks()
    assert "['OPTIONS']['transaction_mode'] = 'IMMEDIATE'" in hint(warning)
    assert "['OPTIONS']['timeout'] = 20" in hint(warning)

    options = {"transaction_mode": "IMMEDIATE", "timeout": 20}
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    [warning] = checks.check_row_locks()
    assert "OPTIONS" not in hint(warning)
    assert 'SILENCED_SYSTEM_CHECKS = ["jobclaims.W001"]' in hint(warning)


def test_the_databases_jobclaims_is_tested_on_pass_e004():
    assert checks.check_claims_database_backend() == []


def test_a_database_jobclaims_has_no_sql_for_is_error_e004(monkeypatch):
    monkeypatch.setattr(connection, "vendor", "oracle")
    [error] = checks.check_claims_database_backend()
    assert error.id == "jobclaims.E004"
    assert "JOBCLAIMS['DATABASE']" in hint(error)


@pytest.fixture
def every_database(django_db_blocker):
    """manage.py check runs Django's own checks too, and on MySQL those ask
    each database's server for its version: let them, then close what they
    opened, so the test databases can be dropped."""
    with django_db_blocker.unblock():
        yield
        for connection in connections.all():
            connection.close()


@pytest.mark.usefixtures("every_database")
def test_manage_py_check_passes_with_the_test_settings():
    out, err = StringIO(), StringIO()
    call_command("check", stdout=out, stderr=err)
    assert "jobclaims.E" not in out.getvalue() + err.getvalue()


@pytest.mark.usefixtures("every_database")
@override_settings(USE_TZ=False)
def test_manage_py_check_fails_on_a_jobclaims_error():
    with pytest.raises(SystemCheckError, match=r"\(jobclaims\.E001\) USE_TZ is False"):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_claimed_under_a_celery_task_is_error_e007_naming_the_fix():
    """In a process of its own: Celery keeps a shared task for every app to come."""
    pytest.importorskip("celery")
    check = [sys.executable, "-m", "django", "check", "--tag", "jobclaims"]
    env = {**os.environ, **child_environment()}
    misordered = subprocess.run(
        check, env={**env, "TESTS_MISORDERED_APP": "1"}, capture_output=True, text=True
    )
    assert misordered.returncode == 1, misordered.stderr
    assert (
        "(jobclaims.E007) The Celery task 'tests.claimed_under' has @claimed under its task "
        "decorator. @claimed cannot be the body of a Celery task: a refused call would look "
        "like a success.\n\tHINT: Drop @claimed and make it a claimed task: "
        "@shared_task(base=jobclaims.contrib.celery.ClaimedTask, claim_window=...). See "
        "https://jobclaims.readthedocs.io/en/stable/checks.html"
        "#jobclaims-e007-claimed-under-a-celery-task-decorator."
    ) in misordered.stderr
    # Under a decorator of its own that does not use functools.wraps, too.
    assert "The Celery task 'tests.claimed_under_a_wrapper' has @claimed" in misordered.stderr
    # The test project's Celery tasks (tests/support/celeryapp.py) put no @claimed under a task.
    celery_app = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tests.support.celeryapp; from django.core.management import "
            "call_command; call_command('check', '--tag', 'jobclaims')",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert celery_app.returncode == 0, celery_app.stderr
    assert "jobclaims.E007" not in celery_app.stderr


@pytest.mark.django_db
def test_a_claimed_task_with_a_bad_option_is_error_e008_not_a_traceback():
    """``manage.py check`` and ``migrate`` both run it, in a process of their own,
    ``migrate`` on the test database, whose server its own checks ask."""
    pytest.importorskip("celery")
    env = {**os.environ, **child_environment(), "TESTS_BAD_TASKS_APP": "1"}
    if url := os.environ.get("DATABASE_URL"):
        test_database = urlsplit(url)._replace(path=f"/{connection.settings_dict['NAME']}")
        env["DATABASE_URL"] = urlunsplit(test_database)
    for command in (["check"], ["migrate", "--plan"]):
        checked = subprocess.run(
            [sys.executable, "-m", "django", *command], env=env, capture_output=True, text=True
        )
        assert checked.returncode == 1, checked.stderr
        assert "Traceback" not in checked.stderr
        assert (
            "(jobclaims.E008) A Celery task cannot be built: task tests.bad_overlap: "
            "claim_allow_overlap must be True or False, not 'no'\n\tHINT: Correct the option "
            "the message names, in the task's decorator or in task_annotations"
        ) in checked.stderr


def test_e007_is_left_out_of_the_checks_a_job_runs(monkeypatch):
    pytest.importorskip("celery")
    from jobclaims.contrib import celery

    monkeypatch.setattr(celery, "misordered_shared_tasks", lambda: ["tests.claimed_under"])
    assert ids(checks.check_celery_task_bodies()) == ["jobclaims.E007"]
    ChargeLedger(stdout=StringIO(), stderr=StringIO()).check()  # No SystemCheckError.


NEW_YORK = override_settings(TIME_ZONE="America/New_York")


@NEW_YORK
def test_a_database_without_time_zone_tables_under_a_local_time_zone_is_warning_w002(
    monkeypatch,
):
    monkeypatch.setattr(connection.features, "has_zoneinfo_database", False)
    [warning] = checks.check_time_zone_tables(databases=["default"])
    assert warning.id == "jobclaims.W002"
    assert "TIME_ZONE is 'America/New_York'" in warning.msg
    assert "mariadb-tzinfo-to-sql /usr/share/zoneinfo" in hint(warning)
    assert "mysql_tzinfo_to_sql" in hint(warning)
    assert "TIME_ZONE = 'UTC'" in hint(warning)


def test_a_database_without_time_zone_tables_needs_none_when_time_zone_is_utc(monkeypatch):
    monkeypatch.setattr(connection.features, "has_zoneinfo_database", False)
    assert checks.check_time_zone_tables(databases=["default"]) == []


@NEW_YORK
def test_w002_is_left_to_the_checks_that_name_a_database(monkeypatch):
    monkeypatch.setattr(connection.features, "has_zoneinfo_database", False)
    assert checks.check_time_zone_tables() == []
    assert checks.check_time_zone_tables(databases=["replica"]) == []


@pytest.mark.django_db
@NEW_YORK
def test_w002_is_given_exactly_where_the_admins_list_of_claims_cannot_date_them():
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    from jobclaims.claims.rule import State
    from tests.support.factories import claim_in_state

    changelist = reverse("admin:jobclaims_jobrun_changelist")
    claim_in_state(State.SUCCEEDED)
    client = Client()
    client.force_login(User.objects.create_superuser("root"))
    warned = ids(checks.check_time_zone_tables(databases=["default"])) == ["jobclaims.W002"]
    page = client.get(changelist)
    assert page.status_code == 200
    assert ('class="toplinks"' in page.content.decode()) is not warned
    assert ("Claims are not grouped by date" in page.content.decode()) is warned


@pytest.mark.usefixtures("every_database")
@NEW_YORK
def test_manage_py_check_database_runs_the_checks_that_ask_the_server(monkeypatch):
    monkeypatch.setattr(connection.features, "has_zoneinfo_database", False)
    plain, named = StringIO(), StringIO()
    call_command("check", stdout=plain, stderr=plain)
    call_command("check", "--database", "default", stdout=named, stderr=named)
    assert "jobclaims.W002" not in plain.getvalue()
    assert "(jobclaims.W002) The 'default' database has no time-zone tables" in named.getvalue()


def test_w001_is_a_deployment_check_that_no_other_command_prints():
    if connection.features.has_select_for_update:
        pytest.skip("this database locks rows, so W001 does not apply to it")
    plain, deploy, job = StringIO(), StringIO(), StringIO()
    call_command("check", stdout=StringIO(), stderr=plain)
    call_command("check", "--deploy", stdout=StringIO(), stderr=deploy)
    ChargeLedger(stdout=StringIO(), stderr=job).check()
    assert "jobclaims.W001" not in plain.getvalue() + job.getvalue()
    assert "(jobclaims.W001) The 'default' database, which claims are written to" in (
        deploy.getvalue()
    )


def test_a_job_your_cron_starts_that_cannot_run_is_warning_w007_naming_it():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "CHARGE_WINDOW": "daliy"}
    done = subprocess.run(
        [sys.executable, "-m", "django", "check", "--tag", "jobclaims"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "(jobclaims.W007) charge_backfilled: unknown window 'daliy': use one of minutely, "
        "hourly, daily, weekly, monthly or a datetime.timedelta"
    ) in done.stderr
    assert checks.check_job_commands() == []  # Its window as written: "hourly".


def test_a_tag_no_pause_could_name_is_warning_w007_and_is_not_recorded(monkeypatch):
    monkeypatch.setattr(ChargeLedger, "tags", ("billing", "card processor"))
    warnings = {warning.msg: warning.id for warning in checks.check_job_commands()}
    # charge_overlapping is a charge_ledger too, tags and all.
    assert warnings == {
        f"{name}: tag 'card processor' must be letters, digits, '_', '.' or '-', "
        "at most 100 characters, like 'billing'": "jobclaims.W007"
        for name in ("charge_ledger", "charge_overlapping")
    }
    assert ("charge_ledger", "#card processor") not in discovery.tags_in_code()
    assert ("charge_ledger", "#billing") in discovery.tags_in_code()


_TIME_ZONE_CHECK = """
import sys
import django
from django.conf import settings

zone = {"TIME_ZONE": sys.argv[1]} if sys.argv[1:] else {}
settings.configure(INSTALLED_APPS=["jobclaims"], USE_TZ=True, **zone)
django.setup()
from jobclaims import checks
from jobclaims.jobs import discovery

for message in checks.check_time_zone_is_set():
    print(message.id, message.msg, message.hint)
"""


def test_time_zone_left_unset_is_warning_w008_and_setting_it_is_the_fix():
    said = [
        subprocess.run(
            [sys.executable, "-c", _TIME_ZONE_CHECK, *zone],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for zone in ([], ["America/Chicago"])
    ]
    assert said[0].startswith(
        "jobclaims.W008 TIME_ZONE is not set, so every window and schedule of your jobs "
        "follows Django's default, America/Chicago"
    )
    assert (
        "Set TIME_ZONE in your settings to the zone your jobs' days and schedules follow" in said[0]
    )
    assert said[1] == ""  # Set, even to the default: a choice made.


@pytest.mark.django_db
def test_w004_is_silent_where_commits_wait_for_no_standby():
    # The suite's servers have no synchronous standby; with one
    # (tests/faults/test_pg_failover.py) a lease below 1.5 x STANDBY_TIMEOUT warns.
    with override_settings(JOBCLAIMS={"STANDBY_TIMEOUT": datetime.timedelta(days=1)}):
        assert checks.check_leases_cover_standby_waits(databases=["default"]) == []


def test_w004_asks_for_a_lease_whose_third_is_left_after_the_longest_wait():
    needed = leases.shortest_covering(datetime.timedelta(seconds=30))
    assert needed == datetime.timedelta(seconds=45)
    assert needed - datetime.timedelta(seconds=30) == needed / leases.RENEWALS_PER_LEASE
