"""The django-health-check check, through the project's health page."""

from __future__ import annotations

import pytest

from jobclaims.clock import database_now
from jobclaims.models import JobRun
from tests.monitored import make_monitored_jobs, save_run

# The check runs in a thread of the health view's own, with a connection of
# its own: it sees committed data only.
pytestmark = pytest.mark.django_db(transaction=True)

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
