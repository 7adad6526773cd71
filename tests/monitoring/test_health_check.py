"""The django-health-check check, through the project's health page."""

from __future__ import annotations

import pytest

from jobclaims.models import JobRun
from jobclaims.time.clock import database_now
from tests.monitoring.test_health_schedules import verdicts
from tests.support.helpers import run_python, unanswered_database_url
from tests.support.monitored import DEAD, FAILING, OVERDUE, make_monitored_jobs, save_run

# The check runs in a thread of the health view's own, with a connection of
# its own: it sees committed data only.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("deployed_now")]

CHECK = "ScheduledJobs()"


def test_the_health_page_fails_naming_each_unhealthy_job_and_what_is_wrong(client):
    make_monitored_jobs()
    response = client.get("/health/?format=json")
    assert response.status_code == 500
    assert response.json()[CHECK] == (
        "Unavailable: dead_job: dead holder; failing_job: failed; overdue_job: overdue, missed"
    )
    assert response.json()["Database(alias='default')"] == "OK"


def test_the_html_health_page_shows_the_failing_check(client):
    make_monitored_jobs()
    response = client.get("/health/", headers={"accept": "text/html"})
    assert response.status_code == 500
    assert b"overdue_job: overdue" in response.content


def test_the_health_page_passes_when_every_job_is_healthy(client):
    save_run("healthy_job", database_now(), JobRun.Status.SUCCEEDED)
    response = client.get("/health/?format=json")
    assert response.status_code == 200
    assert response.json()[CHECK] == "OK"


def test_the_health_page_passes_before_any_job_has_run(client):
    response = client.get("/health/?format=text")
    assert response.status_code == 200
    assert f"{CHECK}: OK" in response.content.decode()


def test_the_check_the_page_and_the_metrics_agree_on_overdue_failing_and_dead_jobs(client):
    make_monitored_jobs()
    assert verdicts(client) == {
        OVERDUE: {"overdue", "missed"},
        FAILING: {"failed"},
        DEAD: {"dead holder"},
    }


#: What the check, the page and the metrics say in a process whose claims
#: database does not answer, one line each.
SAID_WITH_THE_DATABASE_DOWN = """\
import django; django.setup()
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
try:
    call_command("jobclaims_status", "--check")
except CommandError as error:
    print(error.returncode, error)
page = Client().get("/health/?format=json")
print(page.status_code, page.json()["ScheduledJobs()"])
metrics = Client().get("/metrics/")
up = [line for line in metrics.content.decode().splitlines() if line.startswith("jobclaims_up ")]
print(metrics.status_code, *up)
"""


def test_with_the_database_down_the_check_the_page_and_the_metrics_each_say_so():
    done = run_python(
        SAID_WITH_THE_DATABASE_DOWN,
        env={"DATABASE_URL": unanswered_database_url(), "TESTS_ALLOWED_HOSTS": "testserver"},
    )
    assert done.returncode == 0, done.stderr
    check, page, metrics = done.stdout.splitlines()
    assert check.startswith("3 UNKNOWN: the claims database did not answer: ")
    assert page == "500 Unavailable: the claims database did not answer"
    assert metrics == "200 jobclaims_up 0.0"
