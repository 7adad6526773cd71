"""A real Prometheus (Debian's ``prometheus``) scraping a running project's
metrics view, with the documented alert rules loaded: what fires, read from
Prometheus' own API."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from jobclaims.models import JobRun, SchedulerSeen, ScheduleVersion
from jobclaims.scheduling.schedule_versions import fingerprint as schedule_fingerprint
from jobclaims.scheduling.seen import fingerprint
from jobclaims.testing import child_environment
from jobclaims.time.clock import database_now
from tests.support.helpers import unavailable, wait_until
from tests.support.monitored import HOUR, SECOND, hour_start, save_run

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.xdist_group("prometheus"),
    pytest.mark.usefixtures("deployed_now"),
]

ROOT = Path(__file__).resolve().parents[2]
MINUTE = datetime.timedelta(minutes=1)
SERVE = (
    "from jobclaims.testing import connect_child\n"
    "connect_child()\n"
    "import sys\n"
    "from wsgiref.simple_server import WSGIRequestHandler, make_server\n"
    "from django.core.wsgi import get_wsgi_application\n"
    "class Quiet(WSGIRequestHandler):\n"
    "    def log_message(self, *args):\n"
    "        pass\n"
    "make_server('127.0.0.1', int(sys.argv[1]), get_wsgi_application(), handler_class=Quiet)"
    ".serve_forever()\n"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


@pytest.fixture
def prometheus(tmp_path):
    """A project server and a Prometheus scraping it; yields Prometheus' API URL."""
    if shutil.which("prometheus") is None:
        unavailable("the prometheus binary is missing (apt-get install prometheus)")
    site, api = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(site)],
        env={**os.environ, **child_environment(), "TESTS_ALLOWED_HOSTS": "127.0.0.1"},
    )
    scraper = subprocess.Popen(
        [ROOT / "scripts" / "start-prometheus", str(api), f"127.0.0.1:{site}", str(tmp_path)]
    )
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{site}/metrics/"), "the project to serve")
        wait_until(lambda: answers(f"http://127.0.0.1:{api}/-/ready"), "Prometheus to start")
        yield f"http://127.0.0.1:{api}/api/v1"
    finally:
        for process in (scraper, server):
            process.terminate()
            process.wait(timeout=30)


def firing(api: str) -> dict[str, list[dict[str, str]]]:
    """The alerts firing, by name, with each one's labels."""
    found: dict[str, list[dict[str, str]]] = {}
    for alert in get(f"{api}/alerts")["data"]["alerts"]:
        if alert["state"] == "firing":
            found.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
    return found


def evaluated_since_a_scrape(api: str) -> bool:
    """Whether the rules were evaluated after a scrape that had the gauges."""
    up = get(f"{api}/query?query=jobclaims_up")["data"]["result"]
    if not up or up[0]["value"][1] != "1":
        return False
    # When that sample was scraped: a timestamp() of the plain series.
    query = urllib.parse.quote("timestamp(jobclaims_up)")
    scraped = float(get(f"{api}/query?query={query}")["data"]["result"][0]["value"][1])
    [group] = get(f"{api}/rules")["data"]["groups"]
    evaluated = datetime.datetime.fromisoformat(group["lastEvaluation"][:26] + "+00:00")
    return evaluated.timestamp() > scraped


def test_a_healthy_fleet_fires_nothing_then_a_stopped_scheduler_and_a_failure_fire(prometheus):
    this_hour = hour_start(database_now())
    save_run("healthy_job", this_hour - HOUR + SECOND, JobRun.Status.SUCCEEDED)
    wait_until(lambda: evaluated_since_a_scrape(prometheus), "the rules to be evaluated")
    assert firing(prometheus) == {}

    # tick ran until its scheduler stopped ten minutes ago; failing_job failed.
    now = database_now()
    JobRun.objects.create(
        job="tick",
        window=(now - 10 * MINUTE).isoformat("T", "seconds"),
        schedule="*/2 * * * * *",
        owner="web-1:4242:0c0ffee0",
        status=JobRun.Status.SUCCEEDED,
        claimed_at=now - 10 * MINUTE,
        expires_at=now - 9 * MINUTE,
        finished_at=now - 10 * MINUTE + SECOND,
    )
    schedules = {"tick": "*/2 * * * * *"}
    SchedulerSeen.objects.create(
        host="web-1",
        pid=4242,
        schedules=schedules,
        fingerprint=fingerprint(schedules),
        started_at=now - 20 * MINUTE,
        last_seen_at=now - 10 * MINUTE,
    )
    # That scheduler looked at tick as it started: its schedule is in force since.
    ScheduleVersion.objects.create(
        job="tick",
        fingerprint=schedule_fingerprint(schedules["tick"]),
        schedule=schedules["tick"],
        since=now - 20 * MINUTE,
    )
    save_run("failing_job", this_hour - HOUR + SECOND, JobRun.Status.SUCCEEDED)
    save_run("failing_job", this_hour + SECOND, JobRun.Status.FAILED, finished_at=now)

    expected = {"JobOverdue", "JobMissedRuns", "NoLiveScheduler", "JobFailed"}
    wait_until(lambda: set(firing(prometheus)) == expected, f"{expected} to fire")
    alerts = firing(prometheus)
    assert [labels["job_name"] for labels in alerts["JobOverdue"]] == ["tick"]
    [failed] = alerts["JobFailed"]
    # The job's name survives Prometheus' own target label, job.
    assert (failed["job_name"], failed["job"]) == ("failing_job", "jobclaims")
