"""Check-ins: real job processes tell local stand-ins for Sentry Crons, a
healthchecks.io-style ping server and a webhook when each run starts and how
it ended; a monitor that hangs or refuses never slows a run; and with the
claims database stopped nothing is sent, so the monitors see the run missed."""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from jobclaims import testing
from jobclaims.jobs.discovery import scheduled_jobs
from jobclaims.models import JobRun
from jobclaims.running.checkins import Cadence
from jobclaims.time.intervals import IntervalSchedule
from tests.support.helpers import output_of
from tests.support.receivers import (
    PingView,
    Receiver,
    SentryView,
    check_ins,
    sentry_dsn,
)
from tests.testapp.management.commands.charge_ledger import Command

pytestmark = pytest.mark.django_db(transaction=True)

#: ``JOBCLAIMS["MONITOR_TIMEOUT"]`` in these tests' job processes, in seconds.
TIMEOUT = 2.0
#: sentry-sdk's own wait for its queue at exit (its ``shutdown_timeout``).
SENTRY_SHUTDOWN = 2.0
MINUTE = datetime.timedelta(minutes=1)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def run_job(
    *argv: str, monitors: list[dict[str, Any]], **environment: str
) -> testing.InstanceResult:
    """Run a job in a process of its own, checking in with ``monitors``."""
    env = {
        "TESTS_MONITORS": json.dumps(monitors),
        "TESTS_MONITOR_TIMEOUT": str(TIMEOUT),
        "CHATTY_BYTES": "300",
        **environment,
    }
    (instance,) = testing.start(*argv, env=env)
    try:
        return instance.finish(timeout=60)
    finally:
        instance.stop()


def pings(receiver: Receiver, prefix: str) -> list[str]:
    return [each.path for each in receiver.received if each.path.startswith(prefix)]


def test_a_run_checks_in_with_sentry_crons_telling_its_schedule_and_pings_its_url(receiver):
    (job,) = [each for each in scheduled_jobs() if each.command == "ny_open"]
    fire = job.cron.latest_fire(datetime.datetime.now(datetime.timezone.utc))
    assert fire is not None
    key = job.slots.key_at(fire)
    done = run_job(
        "ny_open",
        "--window",
        key,
        monitors=[{"sentry": True}, {"ping": f"{receiver.url}/ping/{{job}}"}],
        TESTS_SENTRY_DSN=sentry_dsn(receiver),
    )
    assert done.returncode == 0, done.stderr
    run = JobRun.objects.get(job="ny_open")

    started, ended = check_ins(receiver)
    assert started["status"] == "in_progress"
    assert ended["status"] == "ok"
    # One check-in, opened and closed: its id is the attempt's claim token.
    assert started["check_in_id"] == ended["check_in_id"] == run.token.hex
    assert started["monitor_slug"] == ended["monitor_slug"] == "ny_open"
    # The schedule, in its own zone, so that Sentry knows when one is missed.
    assert ended["monitor_config"] == {
        "schedule": {"type": "crontab", "value": "30 2 * * *"},
        "timezone": "America/New_York",
        "checkin_margin": 1,
    }
    assert 0 < ended["duration"] < 60
    assert ended["environment"] == "tests"

    start, success = (each for each in receiver.received if each.path.startswith("/ping/"))
    assert (start.method, start.path, success.path) == (
        "POST",
        "/ping/ny_open/start",
        "/ping/ny_open",
    )
    assert start.query == success.query == {"rid": str(uuid.UUID(run.token.hex))}


def test_a_failed_run_pings_fail_with_its_error_and_output_and_a_webhook_gets_json(receiver):
    done = run_job(
        "chatty",
        "--window",
        "2026-12-01",
        monitors=[
            {"ping": f"{receiver.url}/ping/{{job}}?create=1"},
            {"webhook": f"{receiver.url}/hook", "jobs": ["chatty"]},
            {"webhook": f"{receiver.url}/not-for-chatty", "jobs": ["another_job"]},
        ],
        CHATTY_FAIL="1",
    )
    assert done.returncode == 1
    run = JobRun.objects.get(job="chatty")
    assert pings(receiver, "/ping/") == ["/ping/chatty/start", "/ping/chatty/fail"]
    fail = (
        receiver.received[-1]
        if receiver.received[-1].path == "/ping/chatty/fail"
        else next(each for each in receiver.received if each.path == "/ping/chatty/fail")
    )
    assert fail.query["create"] == "1"
    body = fail.body.decode()
    assert body.startswith("RuntimeError: chatty failed on purpose\n\n")
    assert body.endswith(output_of("chatty")[-1000:])

    hooks = [json.loads(each.body) for each in receiver.received if each.path == "/hook"]
    assert [hook["event"] for hook in hooks] == ["start", "failure"]
    assert hooks[1] | {"duration": None} == {
        "event": "failure",
        "job": "chatty",
        "window": "2026-12-01",
        "attempt": 1,
        "owner": run.owner,
        "run_token": run.token.hex,
        "duration": None,
        "error": "RuntimeError: chatty failed on purpose",
        "output": run.output,
        "monitor_config": {
            "schedule": {"type": "interval", "value": 1, "unit": "day"},
            "timezone": "UTC",
            "checkin_margin": 1,
        },
    }
    assert not pings(receiver, "/not-for-chatty")


def test_monitors_that_hang_or_refuse_never_slow_a_run_and_delay_its_exit_at_most_their_bound(
    receiver,
):
    receiver.hanging.set()
    with socket.socket() as closed:  # A port nothing listens on: refused at once.
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    monitors: list[dict[str, Any]] = [
        {"sentry": True},
        {"webhook": f"{receiver.url}/hook"},
        {"ping": f"{refused}/ping/{{job}}"},
    ]
    started = time.time()
    done = run_job(
        "chatty", "--window", "2026-12-01", monitors=monitors, TESTS_SENTRY_DSN=sentry_dsn(receiver)
    )
    exited = time.time()
    assert done.returncode == 0, done.stderr
    run = JobRun.objects.get(job="chatty")
    assert run.status == JobRun.Status.SUCCEEDED
    assert run.finished_at is not None
    # The run itself took what the job takes: no check-in was waited for.
    assert (run.finished_at - run.claimed_at).total_seconds() < TIMEOUT
    # Its process then waited for the check-ins still unsent, within the
    # bound: MONITOR_TIMEOUT for the URLs, and sentry-sdk's own for Sentry,
    # and the interpreter's own exit (at load 8, under coverage, which
    # writes its data as the process ends, up to 4 s); a monitor waited
    # for without the bound would hold it until the test's 60 s.
    late = exited - run.finished_at.timestamp()
    assert late < TIMEOUT + SENTRY_SHUTDOWN + 4, (late, exited - started)
    assert "Could not check in with" in done.stderr


#: A server for the claims that is not there: the database stopped.
UNREACHABLE = {
    "postgresql": "postgres://postgres@127.0.0.1:1/gone",
    "mysql": "mysql://root@127.0.0.1:1/gone",
    "sqlite": "sqlite:////nonexistent-folder/gone.sqlite3",
}


def test_with_the_claims_database_stopped_nothing_checks_in_and_the_monitors_see_it_missed(
    receiver, vendor
):
    monitors: list[dict[str, Any]] = [{"sentry": True}, {"ping": f"{receiver.url}/ping/{{job}}"}]
    sentry = {"TESTS_SENTRY_DSN": sentry_dsn(receiver), "CHATTY_WINDOW": "minutely"}
    done = run_job("chatty", monitors=monitors, **sentry)
    assert done.returncode == 0, done.stderr
    before = len(receiver.received)
    assert before == 4  # Sentry's two check-ins, and two pings.

    # The claims database is stopped: neither a cron-started run nor a
    # scheduler can claim, and neither sends a check-in.
    stopped = {
        **os.environ,
        **testing.child_environment(),
        **{key: value for key, value in sentry.items()},
        "TESTS_MONITORS": json.dumps(monitors),
        "DATABASE_URL": UNREACHABLE[vendor],
        "JOBCLAIMS_DATABASE_NAMES": "",
    }
    for argv in (["chatty"], ["jobclaims_scheduler", "--once"]):
        failed = subprocess.run(
            [sys.executable, "-m", "django", *argv],
            env=stopped,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert failed.returncode == 1, failed
    assert len(receiver.received) == before

    # Sentry knows the schedule from the check-ins it had: a run every minute,
    # counted from the last; once the next one's margin is over with none,
    # it is missed. The ping server knows the period it was given: past it
    # and its grace, the check is down.
    view = SentryView(check_ins(receiver))
    schedule = view.check_ins[0]["monitor_config"]["schedule"]
    assert schedule == {"type": "interval", "value": 1, "unit": "minute"}
    last = view.last_check_in()
    assert view.missed(now=last + MINUTE) == []
    at_next_deadline = last + 2 * MINUTE + datetime.timedelta(seconds=1)
    assert view.missed(now=at_next_deadline) == [last + MINUTE]
    pinged = [each for each in receiver.received if each.path.startswith("/ping/")]
    check = PingView(pinged, period=MINUTE, grace=MINUTE)
    assert check.state(at=time.time()) == "up"
    assert check.state(at=at_next_deadline.timestamp() + MINUTE.total_seconds()) == "down"


class MonitoredLedger(Command):
    monitors = ({"ping": "https://hc-ping.com/uuid", "jobs": ["other"]},)


@pytest.mark.django_db
def test_a_jobs_own_monitor_naming_jobs_is_refused_and_nothing_is_written():
    with pytest.raises(CommandError) as refused:
        call_command(MonitoredLedger(), "--window", "2026-11-29T10:00+00:00")
    assert str(refused.value) == (
        "MonitoredLedger.monitors: a job's own monitor takes no 'jobs'; "
        "name them in JOBCLAIMS['MONITORS']"
    )
    assert not JobRun.objects.exists()


@pytest.mark.parametrize(
    ("cadence", "schedule"),
    [
        (Cadence.of_cron("@daily", "Europe/Paris"), {"type": "crontab", "value": "0 0 * * *"}),
        (Cadence.of_cron("0 */5 * * * *", "UTC"), {"type": "crontab", "value": "*/5 * * * *"}),
        (Cadence.of_cron("*/2 * * * * *", "UTC"), None),  # Finer than Sentry counts.
        # A window's period, counted from the last check-in: cron starts it when it says.
        (Cadence.of_recorded("hourly"), {"type": "interval", "value": 1, "unit": "hour"}),
        (Cadence.of_recorded("weekly"), {"type": "interval", "value": 1, "unit": "week"}),
        (Cadence.of_recorded("600-second"), {"type": "interval", "value": 10, "unit": "minute"}),
        (Cadence.of_recorded("7200-second"), {"type": "interval", "value": 2, "unit": "hour"}),
        (Cadence.of_recorded("90-second"), None),
        (Cadence.of_recorded("5 2 * * *"), {"type": "crontab", "value": "5 2 * * *"}),
        (Cadence.of_recorded(""), None),
        # An interval's period: its fires are that far apart, from any one.
        (
            Cadence.of_schedule(IntervalSchedule("every 90 minutes from 2026-12-05T00:10")),
            {"type": "interval", "value": 90, "unit": "minute"},
        ),
        (Cadence.of_recorded("every 2 hours"), {"type": "interval", "value": 2, "unit": "hour"}),
        (Cadence.of_recorded("every 30 seconds"), None),
        (Cadence.of_recorded("every 2 fortnights"), None),
    ],
)
@pytest.mark.django_db(transaction=False)
def test_a_cadence_tells_sentry_each_schedule_it_can_and_none_it_cannot(cadence, schedule):
    config = cadence.monitor_config()
    assert (config and config["schedule"]) == schedule


@pytest.mark.django_db(transaction=False)
def test_the_longest_run_sentry_is_told_is_the_jobs_timeout_in_whole_minutes_rounded_up():
    cadence = Cadence.of_cron("5 2 * * *", "UTC", datetime.timedelta(seconds=61))
    assert cadence.monitor_config() == {
        "schedule": {"type": "crontab", "value": "5 2 * * *"},
        "timezone": "UTC",
        "checkin_margin": 1,
        "max_runtime": 2,
    }
