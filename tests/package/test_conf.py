from __future__ import annotations

import datetime
import re

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from jobclaims import conf
from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun


def test_every_key_has_its_default_when_jobclaims_is_not_set():
    assert jobclaims_settings.default_lease == datetime.timedelta(minutes=10)
    assert jobclaims_settings.database is None
    assert jobclaims_settings.clock_skew_warning == datetime.timedelta(minutes=1)


def test_override_settings_changes_a_value_at_once_and_leaves_the_others_default():
    with override_settings(JOBCLAIMS={"DEFAULT_LEASE": datetime.timedelta(hours=1)}):
        assert jobclaims_settings.default_lease == datetime.timedelta(hours=1)
        assert jobclaims_settings.clock_skew_warning == datetime.timedelta(minutes=1)
    assert jobclaims_settings.default_lease == datetime.timedelta(minutes=10)


def test_a_value_read_is_read_again_once_the_setting_changes(settings):
    assert jobclaims_settings.standby_timeout == datetime.timedelta(seconds=30)
    settings.JOBCLAIMS = {"STANDBY_TIMEOUT": datetime.timedelta(seconds=5)}
    assert jobclaims_settings.standby_timeout == datetime.timedelta(seconds=5)
    with override_settings(JOBCLAIMS={"STANDBY_TIMEOUT": datetime.timedelta(seconds=7)}):
        assert jobclaims_settings.standby_timeout == datetime.timedelta(seconds=7)
    assert jobclaims_settings.standby_timeout == datetime.timedelta(seconds=5)


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@override_settings(JOBCLAIMS={"DATABASE": "replica"})
def test_a_database_alias_read_is_checked_again_once_databases_change():
    assert jobclaims_settings.database == "replica"
    databases = {"default": settings.DATABASES["default"]}
    with override_settings(DATABASES=databases), pytest.raises(ImproperlyConfigured):
        jobclaims_settings.database  # noqa: B018


def test_a_bad_value_raises_at_every_read():
    with override_settings(JOBCLAIMS={"STANDBY_TIMEOUT": 30}):
        for _ in range(2):
            with pytest.raises(ImproperlyConfigured, match="STANDBY_TIMEOUT"):
                jobclaims_settings.standby_timeout  # noqa: B018


def test_reading_a_value_never_writes_into_the_projects_settings():
    assert jobclaims_settings.default_lease == datetime.timedelta(minutes=10)
    assert jobclaims_settings.database is None
    assert not hasattr(settings, "JOBCLAIMS")


@override_settings(JOBCLAIMS={"DEFAULT_LEASE": datetime.timedelta(minutes=-5)})
def test_reading_a_bad_value_raises_improperly_configured_naming_the_key():
    with pytest.raises(
        ImproperlyConfigured,
        match=r"JOBCLAIMS\['DEFAULT_LEASE'\] must be a positive datetime.timedelta",
    ):
        _ = jobclaims_settings.default_lease


@override_settings(JOBCLAIMS={"DEFAULT_LEASE": datetime.timedelta(days=367)})
def test_reading_a_default_lease_longer_than_a_lease_may_last_raises_the_check_message():
    [problem] = conf.problems()
    with pytest.raises(ImproperlyConfigured) as refused:
        _ = jobclaims_settings.default_lease
    assert str(refused.value) == problem


@override_settings(JOBCLAIMS={"DATABASE": "claims"})
def test_a_database_alias_must_be_one_of_databases():
    with pytest.raises(ImproperlyConfigured, match="'claims', which is not in DATABASES"):
        _ = jobclaims_settings.database


@override_settings(JOBCLAIMS="DEFAULT_LEASE=600")
def test_a_jobclaims_setting_that_is_not_a_dict_cannot_be_read():
    with pytest.raises(ImproperlyConfigured, match="JOBCLAIMS must be a dict, not str"):
        _ = jobclaims_settings.default_lease


@override_settings(
    JOBCLAIMS={
        "DEFAULT_LEASE": "10m",
        "DATABASE": 1,
        "CLOCK_SKEW_WARNING": datetime.timedelta(seconds=30),
        "LEASES": {},
    }
)
def test_problems_lists_every_bad_key_and_value_at_once():
    assert conf.problems() == [
        "JOBCLAIMS has an unknown key 'LEASES'; the keys are "
        "DEFAULT_LEASE, DATABASE, CLOCK_SKEW_WARNING, STANDBY_TIMEOUT, HEALTH_GRACE, "
        "METRICS_TEXTFILE, MISSED_LOOK_BACK, SCHEDULER_GRACE, HEALTH_TIMEOUT, STOP_GRACE, "
        "QUEUE_LEASE, TASK_SCHEDULES, HISTORY_MAX_AGE, HISTORY_MAX_ROWS_PER_JOB, "
        "RETENTION_EVERY, OUTPUT_KEPT, MONITORS, MONITOR_TIMEOUT",
        "JOBCLAIMS['DEFAULT_LEASE'] must be a positive datetime.timedelta, not '10m'",
        "JOBCLAIMS['DATABASE'] must be a database alias (a str) or None, not 1",
    ]


@override_settings(JOBCLAIMS={"STANDBY_TIMEOUT": 5})
def test_a_standby_timeout_in_seconds_is_refused_naming_the_type_it_must_be():
    message = "JOBCLAIMS['STANDBY_TIMEOUT'] must be a positive datetime.timedelta, not 5"
    assert conf.problems() == [message]
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        _ = jobclaims_settings.standby_timeout


def test_the_standby_timeout_is_half_a_minute_unless_set():
    assert jobclaims_settings.standby_timeout == datetime.timedelta(seconds=30)


def test_claims_follow_the_routers_write_database_when_database_is_not_set():
    assert jobclaims_settings.claims_database(JobRun) == "default"
    with override_settings(DATABASE_ROUTERS=["tests.support.routers.WritesToReplicaRouter"]):
        assert jobclaims_settings.claims_database(JobRun) == "replica"


@override_settings(
    DATABASE_ROUTERS=["tests.support.routers.WritesToReplicaRouter"],
    JOBCLAIMS={"DATABASE": "default"},
)
def test_database_overrides_the_router_for_claims():
    assert jobclaims_settings.claims_database(JobRun) == "default"


@override_settings(JOBCLAIMS={"HEALTH_GRACE": {"charge": 3}, "METRICS_TEXTFILE": ""})
def test_a_grace_that_is_no_timedelta_and_an_empty_textfile_path_are_problems():
    assert conf.problems() == [
        "JOBCLAIMS['HEALTH_GRACE'] must be a dict of job names to positive "
        "datetime.timedelta values, not {'charge': 3}",
        "JOBCLAIMS['METRICS_TEXTFILE'] must be a file path (a str or pathlib.Path) or None, not ''",
    ]


@override_settings(JOBCLAIMS={"HEALTH_GRACE": {"charge": datetime.timedelta(hours=3)}})
def test_a_job_without_a_grace_of_its_own_gets_none_for_one_window():
    assert jobclaims_settings.health_grace("charge") == datetime.timedelta(hours=3)
    assert jobclaims_settings.health_grace("other") is None
    assert jobclaims_settings.metrics_textfile is None


@override_settings(JOBCLAIMS={"STOP_GRACE": 25})
def test_a_stop_grace_in_seconds_is_refused_naming_the_type_it_must_be():
    message = "JOBCLAIMS['STOP_GRACE'] must be a datetime.timedelta of 0 or more, not 25"
    assert conf.problems() == [message]
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        _ = jobclaims_settings.stop_grace


def test_a_stopped_scheduler_gives_its_jobs_25_seconds_unless_set():
    # Below Kubernetes' default terminationGracePeriodSeconds, 30 s.
    assert jobclaims_settings.stop_grace == datetime.timedelta(seconds=25)


@override_settings(JOBCLAIMS={"HISTORY_MAX_AGE": datetime.timedelta(hours=12)})
def test_a_history_age_shorter_than_the_look_back_is_refused_naming_both():
    with pytest.raises(ImproperlyConfigured) as refused:
        _ = jobclaims_settings.history_max_age
    assert str(refused.value) == (
        "JOBCLAIMS['HISTORY_MAX_AGE'] is 12:00:00, shorter than MISSED_LOOK_BACK (1 day, 0:00:00): "
        "health would take the runs it deletes for missed ones; keep at least MISSED_LOOK_BACK, "
        "or shorten it"
    )
    look_back = datetime.timedelta(hours=6)
    with override_settings(
        JOBCLAIMS={"HISTORY_MAX_AGE": look_back * 2, "MISSED_LOOK_BACK": look_back}
    ):
        assert jobclaims_settings.history_max_age == look_back * 2


@pytest.mark.parametrize("rows", [99, 0, 1.5, True, "10000"])
def test_a_bound_by_count_below_what_health_reads_is_refused(rows):
    refused = pytest.raises(ImproperlyConfigured, match="must be a whole number of at least 100")
    with override_settings(JOBCLAIMS={"HISTORY_MAX_ROWS_PER_JOB": rows}), refused:
        _ = jobclaims_settings.history_max_rows_per_job


@pytest.mark.parametrize(
    ("monitors", "message"),
    [
        ({"sentry": True}, 'must be a list of monitors, like [{"sentry": True}]'),
        ([{"ping": "hc-ping.com/abc"}], "entry 0: ['ping'] must be an http:// or https:// URL"),
        (
            [{"sentry": True}, {"ping": "https://a", "webhook": "https://b"}],
            "entry 1: must name one monitor",
        ),
        ([{"webhook": "https://b", "job": ["x"]}], "has the unknown key 'job'"),
        ([{"webhook": "https://b", "jobs": "nightly"}], "['jobs'] must be a list of job names"),
        ([{"sentry": False}], "['sentry'] must be True or a slug"),
    ],
)
def test_a_monitor_entry_that_cannot_work_is_refused_naming_the_fix(monitors, message):
    with override_settings(JOBCLAIMS={"MONITORS": monitors}):
        [problem] = conf.problems()
        assert message in problem
        with pytest.raises(ImproperlyConfigured):
            _ = jobclaims_settings.monitors
