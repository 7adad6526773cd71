"""The alarms as an operator's pager hears them: a real Prometheus loading
the shipped rules, a real Alertmanager that posts every notification, firing
and resolved, to a webhook here, a server of the project's metrics, and a
scheduler, on a PostgreSQL server of the test's own, which the test stops,
then pauses (SIGSTOP), as outages do.

One scenario, in the order an operator would meet it: a deploy that reached
the web servers and not the schedulers, retries that succeed, the claims
database stopped, then hanging. Through it all a job that is broken stays
firing: nobody is told "resolved" while it is not.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.contrib.test_prometheus_server import ROOT, SERVE, answers, free_port, get
from tests.support.helpers import once_across_the_databases, unavailable
from tests.support.own_postgres import OwnPostgres

pytestmark = pytest.mark.xdist_group("prometheus")

#: The web servers' code: a job the schedulers' code does not have yet.
NEW_CODE = {"RESCHEDULED_JOB_NAME": "report_renamed", "RESCHEDULED_SCHEDULE": "*/5 * * * * *"}
#: In both: a job whose every fire fails once and succeeds at its retry, its
#: failed process lingering 3 s, which the scheduler waits for to settle it.
RETRIED = {"RETRIED_ONCE_SCHEDULE": "*/5 * * * * *", "RETRIED_ONCE_LINGER": "3"}
#: Scrapes every 2 s, each timing out at 2 s; the server's health reads give
#: up at 1 s, well inside it.
SCRAPE = "2s"
HEALTH_TIMEOUT = "1"


class Webhook:
    """Alertmanager's receiver: every alert of every notification, in order."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        received = self.alerts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.extend(json.loads(body)["alerts"])
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def told(self, status: str, alertname: str, **labels: str) -> list[dict[str, Any]]:
        return [
            alert
            for alert in list(self.alerts)
            if alert["status"] == status
            and alert["labels"]["alertname"] == alertname
            and all(alert["labels"].get(name) == value for name, value in labels.items())
        ]


@pytest.fixture
def database() -> Iterator[OwnPostgres]:
    server = OwnPostgres(free_port())
    try:
        server.start()
        yield server
    finally:
        server.remove()


def django(arguments: list[str], environment: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "django", *arguments], env=environment)


def firing(api: str, alertname: str, **labels: str) -> bool:
    return any(
        alert["state"] == "firing"
        and alert["labels"]["alertname"] == alertname
        and all(alert["labels"].get(name) == value for name, value in labels.items())
        for alert in get(f"{api}/alerts")["data"]["alerts"]
    )


def query(api: str, promql: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = get(f"{api}/query?query={urllib.parse.quote(promql)}")["data"][
        "result"
    ]
    return result


def holding(
    condition: Callable[[], bool], meanwhile: Callable[[], None], what: str, timeout: float
) -> None:
    """Wait for ``condition``, checking ``meanwhile`` (which asserts) at every look."""
    deadline = time.monotonic() + timeout
    while True:
        meanwhile()
        if condition():
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_alarms_hold_through_a_half_rolled_deploy_retries_and_a_stopped_and_a_hung_database(
    database: OwnPostgres, tmp_path: Path
):
    once_across_the_databases()
    for program in ("prometheus", "prometheus-alertmanager"):
        if shutil.which(program) is None:
            unavailable(f"{program} is missing (apt-get install {program})")
    base = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": os.getcwd(),
        "DATABASE_URL": database.url,
        **RETRIED,
    }
    web = {**base, **NEW_CODE, "TESTS_ALLOWED_HOSTS": "127.0.0.1"}
    web["TESTS_HEALTH_TIMEOUT"] = HEALTH_TIMEOUT
    # The deploy ran migrate with the new code, ten minutes ago: it recorded report_renamed.
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "-v", "0"], env=web, check=True, timeout=300
    )
    with psycopg.connect(database.url, autocommit=True) as sql:
        sql.execute(
            "UPDATE jobclaims_knowncommand SET first_seen_at = now() - interval '10 minutes' "
            "WHERE job = 'report_renamed'"
        )
        # broken_job, started by cron, failed this hour: broken until a run succeeds.
        hour = datetime.datetime.now(datetime.timezone.utc).replace(minute=0, second=0)
        sql.execute(
            'INSERT INTO jobclaims_jobrun (job, "window", schedule, owner, token, status, '
            "attempt, failures, error, claimed_at, expires_at, finished_at) VALUES "
            "('broken_job', %s, 'hourly', 'cron-1:99:0c0ffee0', gen_random_uuid(), 'failed', "
            "1, 0, 'RuntimeError: the ledger is closed', now(), now() + interval '1 hour', now())",
            [hour.isoformat(timespec="minutes")],
        )

    webhook = Webhook()
    site, api_port, manager = free_port(), free_port(), free_port()
    (tmp_path / "alertmanager").mkdir()
    (tmp_path / "prometheus").mkdir()
    processes = [
        subprocess.Popen(
            [
                ROOT / "scripts" / "start-alertmanager",
                str(manager),
                webhook.url,
                str(tmp_path / "alertmanager"),
            ]
        ),
        subprocess.Popen([sys.executable, "-c", SERVE, str(site)], env=web),
        # The schedulers still run the code before the deploy: no report_renamed.
        django(["jobclaims_scheduler", "--job", "retried_once", "-v", "0"], base),
        subprocess.Popen(
            [
                ROOT / "scripts" / "start-prometheus",
                str(api_port),
                f"127.0.0.1:{site}",
                str(tmp_path / "prometheus"),
                f"127.0.0.1:{manager}",
            ],
            env={**os.environ, "SCRAPE_INTERVAL": SCRAPE},
        ),
    ]
    api = f"http://127.0.0.1:{api_port}/api/v1"
    broken = {"job_name": "broken_job"}
    try:
        for url in (f"http://127.0.0.1:{site}/metrics/", f"{api[:-7]}/-/ready"):
            holding(functools.partial(answers, url), lambda: None, f"{url} to answer", 60)

        # A half-rolled deploy: schedulers are live, none runs the new job.
        holding(
            lambda: bool(
                webhook.told("firing", "NoLiveScheduler", job_name="report_renamed")
                and webhook.told("firing", "JobFailed", **broken)
            ),
            lambda: None,
            "the new job's and the broken job's alarms to be told",
            60,
        )
        assert not firing(api, "NoLiveScheduler", job_name="retried_once")
        with psycopg.connect(database.url, autocommit=True) as sql:

            def retried_fires() -> int:
                row = sql.execute(
                    "SELECT count(*) FROM jobclaims_jobrun WHERE job = 'retried_once' "
                    "AND status = 'succeeded' AND attempt = 2"
                ).fetchone()
                return int(row[0]) if row else 0

            holding(lambda: retried_fires() >= 3, lambda: None, "three fires retried", 60)

        def still_broken() -> None:
            assert firing(api, "JobFailed", **broken), webhook.alerts

        # The database stops: the broken job stays firing, JobclaimsDown fires.
        database.stop()
        holding(lambda: firing(api, "JobclaimsDown"), still_broken, "JobclaimsDown, stopped", 60)
        database.start()
        holding(
            lambda: (
                not firing(api, "JobclaimsDown")
                and [each["value"][1] for each in query(api, "jobclaims_up")] == ["1"]
            ),
            still_broken,
            "the database to answer again",
            60,
        )

        # The database hangs: every scrape still answers in time, saying so.
        database.pause()
        try:
            holding(lambda: firing(api, "JobclaimsDown"), still_broken, "JobclaimsDown, hung", 60)
            scraped = query(api, f"min_over_time(up[{int(SCRAPE[:-1]) * 10}s])")
            assert [each["value"][1] for each in scraped] == ["1"], scraped
        finally:
            database.resume()
        time.sleep(3)  # Whatever Alertmanager was about to tell, it has told.

        assert webhook.told("firing", "JobclaimsDown")
        # Never "resolved" for the broken job, whatever the database did.
        assert not webhook.told("resolved", "JobFailed", **broken), webhook.alerts
        # A retry that succeeds is no failure at any scrape, nor any alert.
        # (Its fires missed while the database was out are other problems.)
        assert not query(
            api,
            'max_over_time(jobclaims_job_problem{job_name="retried_once", problem="failed"}[1h])',
        )
        assert not webhook.told("firing", "JobFailed", job_name="retried_once")
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        webhook.server.shutdown()
