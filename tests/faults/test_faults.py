"""Long runs and faults: renewal, takeover after a kill, pauses, signals,
cut connections and skewed clocks, with real processes on a real database."""

from __future__ import annotations

import datetime
import os
import signal
import time

import pytest
from django.db import connection

from jobclaims.models import JobRun
from jobclaims.testing import Instance, StartingLine, race, start
from jobclaims.time.clock import database_now
from jobclaims.time.windows import resolve
from tests.support.helpers import outcomes, wait_until
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = "2026-11-29T10:00+00:00"
SHORT = datetime.timedelta(seconds=5)


def read_until(instance: Instance, text: str) -> None:
    """Read the instance's output up to the line containing ``text``."""
    assert instance.process.stdout is not None, "started with stdout=PIPE"
    for line in instance.process.stdout:
        if text in line:
            return
    raise AssertionError(f"the instance ended before printing {text!r}")


def wait_stopped(instance: Instance) -> None:
    """Wait until the instance's process is stopped (SIGSTOP), as ``ps`` shows ``T``."""
    stat = f"/proc/{instance.process.pid}/stat"

    def stopped() -> bool:
        with open(stat) as status:
            return status.read().rpartition(")")[2].split()[0] == "T"

    wait_until(stopped, "the instance to stop itself")


def test_a_run_three_times_longer_than_its_lease_is_never_taken_over_while_alive():
    [long_run] = start("charge_ledger", "--window", WINDOW, "--lease", "1", "--hold", "3")
    wait_until(Charge.objects.exists, "the long run to start")
    while long_run.process.poll() is None:
        assert JobRun.objects.claim("charge_ledger", WINDOW, lease=SHORT) is None
        assert not JobRun.objects.expired().exists()
        time.sleep(0.1)
    assert long_run.finish().returncode == 0
    run = JobRun.objects.get()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 1)


def test_a_killed_run_is_taken_over_within_one_lease(capsys):
    lease = 3.0
    [victim] = start("charge_ledger", "--window", WINDOW, "--lease", str(lease), "--hold", "60")
    wait_until(Charge.objects.exists, "the run to start")
    time.sleep(lease)  # Let the heartbeat renew at least once before the kill.
    os.kill(victim.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    victim.finish()
    while (successor := JobRun.objects.claim("charge_ledger", WINDOW, lease=SHORT)) is None:
        time.sleep(0.02)
    delay = time.monotonic() - killed_at
    with capsys.disabled():
        print(f"\n[{connection.vendor}] takeover {delay:.2f} s after SIGKILL, lease {lease} s")
    assert successor.attempt == 2
    # Within one lease; the slack is for a loaded machine's process scheduling.
    assert delay <= lease + 1.5


def test_a_paused_run_is_taken_over_and_its_fenced_writes_are_refused_after_it_resumes():
    [paused] = start("charge_steps", "--window", WINDOW, "--lease", "1", "--steps", "20")
    read_until(paused, "step 0 done")
    os.kill(paused.process.pid, signal.SIGSTOP)
    try:
        wait_until(JobRun.objects.expired().exists, "the paused run's lease to end")
        [successor] = race(
            "charge_steps", "--window", WINDOW, "--steps", "3", "--pause", "0", instances=1
        )
        assert successor.outcome == "ran", successor
        written_before_resume = Charge.objects.filter(attempt=1).count()
    finally:
        os.kill(paused.process.pid, signal.SIGCONT)
    late = paused.finish()
    assert late.returncode == 1
    assert "is no longer held by" in late.stderr
    assert Charge.objects.filter(attempt=1).count() == written_before_resume
    assert Charge.objects.filter(attempt=2).count() == 3
    run = JobRun.objects.get()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 2)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_records_the_claim_failed_and_the_next_instance_runs_at_once(signum):
    [stopped] = start("charge_ledger", "--window", WINDOW, "--lease", "600", "--hold", "60")
    wait_until(Charge.objects.exists, "the run to start")
    os.kill(stopped.process.pid, signum)
    result = stopped.finish(timeout=10)
    assert result.returncode == 128 + signum
    assert f"interrupted by {signum.name}" in result.stderr
    run = JobRun.objects.get()
    assert run.status == JobRun.Status.FAILED
    assert run.error.startswith(
        f"jobclaims.exceptions.JobInterrupted: interrupted by {signum.name}\n"
    )

    [next_run] = race("charge_ledger", "--window", WINDOW, instances=1)
    assert next_run.outcome == "ran", next_run
    assert JobRun.objects.get().attempt == 2


def test_a_hung_run_expired_by_an_operator_is_taken_over_by_the_next_instance():
    [hung] = start("charge_hung", "--window", WINDOW, "--lease", "3")
    wait_until(Charge.objects.exists, "the hung run to start")
    [expired] = race("jobclaims_expire", "charge_hung", instances=1)
    assert expired.stdout.startswith("Expired 1 claim of charge_hung"), expired
    time.sleep(2)  # Two heartbeats of the hung run, each of which used to renew.

    [successor] = race("charge_hung", "--window", WINDOW, "--hang", "0", instances=1)
    assert successor.outcome == "ran", successor
    os.kill(hung.process.pid, signal.SIGUSR1)  # It wakes up at last.
    late = hung.finish()
    assert late.returncode == 1
    assert "ended before its renewal" in late.stderr
    assert "so its success was not recorded" in late.stderr
    run = JobRun.objects.get()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 2)


def test_a_hung_run_past_its_max_run_time_is_taken_over_by_the_next_instance():
    # Renewed every second, up to the max run time, twice the lease.
    [hung] = start("charge_hung", "--window", WINDOW, "--lease", "3", "--max-run-time", "6")
    wait_until(Charge.objects.exists, "the hung run to start")
    wait_until(JobRun.objects.expired().exists, "the lease to end at the max run time")
    run = JobRun.objects.get()
    assert run.expires_at == run.claimed_at + datetime.timedelta(seconds=6)

    [successor] = race("charge_hung", "--window", WINDOW, "--hang", "0", instances=1)
    assert successor.outcome == "ran", successor
    os.kill(hung.process.pid, signal.SIGUSR1)
    late = hung.finish()
    assert late.returncode == 1
    assert "reached its max run time" in late.stderr
    assert "so its success was not recorded" in late.stderr
    assert Charge.objects.filter(attempt=2).count() == 1


@pytest.mark.parametrize("moment", ["before", "after"])
def test_a_stop_signal_while_the_outcome_is_recorded_is_reported_as_what_was_recorded(moment):
    [stopped] = start(
        "charge_ledger", "--window", WINDOW, env={"TESTAPP_STOP_AROUND_RELEASE": moment}
    )
    read_until(stopped, f"stopped {moment} recording the outcome")
    wait_stopped(stopped)
    os.kill(stopped.process.pid, signal.SIGTERM)
    os.kill(stopped.process.pid, signal.SIGCONT)
    result = stopped.finish(timeout=10)
    assert result.returncode == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM; it had finished, and its success is recorded" in result.stderr
    assert JobRun.objects.get().status == JobRun.Status.SUCCEEDED


def test_a_takeover_just_after_the_outcome_is_recorded_does_not_crash_the_released_run(vendor):
    [released] = start(
        "charge_ledger",
        "--window",
        WINDOW,
        env={"TESTAPP_STOP_AROUND_RELEASE": "after", "TESTAPP_LOG": "INFO"},
    )
    read_until(released, "stopped after recording the outcome")
    wait_stopped(released)
    [rerun] = start("charge_ledger", "--window", WINDOW, "--force", "--hold", "30")
    try:
        wait_until(lambda: JobRun.objects.running().filter(attempt=2).exists(), "the rerun")
        os.kill(released.process.pid, signal.SIGCONT)
        result = released.finish(timeout=10)
    finally:
        rerun.stop()
    assert result.returncode == 0, result
    # The release's UPDATE returns its finished_at where the database has
    # RETURNING; SQLite's is read back, from the row the rerun now holds.
    if vendor == "sqlite":
        assert "taken over since, so its duration is unknown" in result.stderr
    else:
        assert f"Finished charge_ledger {WINDOW}: succeeded in " in result.stderr
    assert "Ran charge_ledger" in result.stdout


def cut_other_connections() -> int:
    """End every other session on the test database, as a failover would."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return len(cursor.fetchall())
        cursor.execute(
            "SELECT id FROM information_schema.processlist "
            "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
        )
        ids = [row[0] for row in cursor.fetchall()]
        for session in ids:
            cursor.execute(f"KILL {int(session)}")
        return len(ids)


def test_a_cut_database_connection_ends_in_one_recorded_success():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite is a file opened by the process: there is no connection to cut")
    [cut] = start("charge_steps", "--window", WINDOW, "--lease", "30", "--steps", "50")
    read_until(cut, "step 0 done")
    assert cut_other_connections() >= 1
    result = cut.finish()
    run = JobRun.objects.get()
    if result.returncode == 0:
        # PostgreSQL: the fenced step that met the cut wrote nothing and is
        # entered again on a fresh connection (jobclaims.claims.retries).
        assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 1)
        return
    # MariaDB: the cut ends the step's transaction as it resets autocommit,
    # in the job: the run fails, recorded failed, and the next one takes over.
    assert result.returncode == 1
    assert "OperationalError" in result.stderr or "InterfaceError" in result.stderr
    assert run.status == JobRun.Status.FAILED
    [next_run] = race("charge_steps", "--window", WINDOW, "--pause", "0", instances=1)
    assert next_run.outcome == "ran", next_run
    run = JobRun.objects.get()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 2)


def test_a_host_clock_an_hour_off_gets_the_same_outcome_as_a_right_one():
    # Overlapping windows are allowed, so only agreeing on the window can
    # make one of the two instances skip.
    line = StartingLine()
    group = [
        Instance("charge_overlapping", line=line, env={"TESTAPP_HOST_CLOCK_OFFSET": offset})
        for offset in ("0", "3600")
    ]
    for instance in group:
        instance.wait_ready()
    before = resolve("hourly").key_at(database_now())
    line.release()
    results = [instance.finish() for instance in group]
    after = resolve("hourly").key_at(database_now())
    assert outcomes(results) == {"ran": 1, "skipped": 1}, results
    assert JobRun.objects.get().window in {before, after}


def test_a_host_clock_an_hour_off_claims_the_window_of_the_database_clock():
    before = resolve("hourly").key_at(database_now())
    [skewed] = race("charge_ledger", instances=1, env={"TESTAPP_HOST_CLOCK_OFFSET": "-3600"})
    after = resolve("hourly").key_at(database_now())
    assert skewed.outcome == "ran", skewed
    assert JobRun.objects.get().window in {before, after}


def test_an_instance_skips_cleanly_while_the_holder_keeps_a_write_transaction_open():
    # On SQLite the holder's open transaction keeps the whole file locked,
    # so recording the skip gives up after the busy timeout.
    [holder] = start(
        "charge_ledger", "--window", WINDOW, "--hold-transaction", "7", "--lease", "30"
    )
    read_until(holder, "charging as attempt 1")
    [skipper] = race("charge_ledger", "--window", WINDOW, instances=1)
    assert skipper.returncode == 0, skipper.stderr
    assert skipper.outcome == "skipped"
    assert "Traceback" not in skipper.stderr
    assert holder.finish().returncode == 0
    assert Charge.objects.count() == 1
