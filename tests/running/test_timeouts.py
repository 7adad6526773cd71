"""A job's hard timeout, with real processes: under a scheduler and started directly."""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time

import pytest
from django.db import connection, transaction

from jobclaims.exceptions import JobInterrupted
from jobclaims.jobs import schedules
from jobclaims.jobs.commands import TIMED_OUT_STATUS
from jobclaims.models import JobRun
from jobclaims.running import attempts
from jobclaims.running.attempts import RetryPolicy
from jobclaims.running.stopping import interrupting_on_stop_signals
from jobclaims.testing import start
from tests.support.helpers import is_gone, run_command, states_of
from tests.testapp.management.commands import stubborn
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT, GRACE = "1.5", "1"
#: A stubborn job timed out quickly; every minute's fire, for a --once.
TIMED = {
    "STUBBORN_SCHEDULE": "* * * * *",
    "STUBBORN_TIMEOUT": TIMEOUT,
    "STUBBORN_GRACE": GRACE,
}
IGNORING = {**TIMED, "STUBBORN_IGNORES_SIGTERM": "1"}
#: A run that heeds its SIGTERM has its last fenced write, clean-up and
#: release to make on its way out: seconds on a loaded machine, so a grace
#: that only a run ignoring the SIGTERM reaches.
HEEDING = {**TIMED, "STUBBORN_GRACE": "10"}
#: Under a scheduler the timeout counts from the job's process start, which
#: takes a second or more on a loaded machine: the job's own handling of
#: SIGTERM is in place well before a timeout this long.
SCHEDULED_TIMEOUT = 5
SCHEDULED = {**TIMED, "STUBBORN_TIMEOUT": str(SCHEDULED_TIMEOUT)}


def the_run() -> JobRun:
    return JobRun.objects.get(job="stubborn")


def started_pid() -> int:
    """The process of the stubborn job's run."""
    return Charge.objects.get(job="stubborn", step=stubborn.STARTED).pid


def cleaned_up(run: JobRun) -> bool:
    """Whether the run's own clean-up ran as it ended."""
    return Charge.objects.filter(job=run.job, window=run.window, step=stubborn.CLEANED).exists()


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_that_ignores_sigterm_is_killed_by_its_scheduler_and_recorded_timed_out():
    # Fails without the timeout: the job never ends, and --once never returns.
    env = {**SCHEDULED, "STUBBORN_IGNORES_SIGTERM": "1"}
    [host] = start("jobclaims_scheduler", "--once", "--job", "stubborn", env=env)
    result = host.finish(timeout=60)
    assert result.returncode == 0, result
    assert "sent pid" in result.stderr + result.stdout
    assert "SIGKILL" in result.stderr + result.stdout
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    assert run.error.startswith(
        "Timed out after 0:00:05: its scheduler sent it SIGTERM at its timeout, "
        "and killed it (SIGKILL) 0:00:01 later"
    ), run.error
    assert run.failures == 1  # A failure for the retry policy.
    assert run.finished_at is not None
    took = (run.finished_at - run.claimed_at).total_seconds()
    assert SCHEDULED_TIMEOUT + float(GRACE) <= took < SCHEDULED_TIMEOUT + 10, took
    assert is_gone(started_pid())


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_that_heeds_the_sigterm_at_its_timeout_is_recorded_timed_out_with_its_traceback():
    # A grace long enough that only the job's own exit ends it before the SIGKILL.
    long_grace = 10
    env = {**SCHEDULED, "STUBBORN_GRACE": str(long_grace)}
    [host] = start("jobclaims_scheduler", "--once", "--job", "stubborn", env=env)
    result = host.finish(timeout=60)
    assert result.returncode == 0, result
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    head, _, traceback = run.error.partition("\n\n")
    assert head == "Timed out after 0:00:05: its scheduler sent it SIGTERM."
    assert "interrupted by SIGTERM" in traceback
    took = (run.finished_at - run.claimed_at).total_seconds()  # type: ignore[operator]
    assert SCHEDULED_TIMEOUT <= took < SCHEDULED_TIMEOUT + long_grace, took


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_started_directly_that_ignores_sigterm_kills_itself_and_is_recorded_timed_out():
    # Fails without the watchdog: the process ignores its own SIGTERM and runs on.
    [instance] = start("stubborn", env=IGNORING)
    result = instance.finish(timeout=30)
    assert result.returncode == -9, result
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    assert run.error.startswith(
        "Timed out after 0:00:01.500000: its own process sent it SIGTERM at its timeout"
    ), run.error
    assert states_of("stubborn") == {run.window: "timed-out"}


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_started_directly_stops_at_its_timeout_and_exits_as_timeout_does():
    [instance] = start("stubborn", env=HEEDING)
    result = instance.finish(timeout=30)
    assert result.returncode == TIMED_OUT_STATUS, result
    assert "was stopped at its timeout of 0:00:01.500000" in result.stderr
    assert "recorded timed out" in result.stderr
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    assert run.error.startswith("jobclaims.exceptions.JobTimedOut: stopped at its timeout")
    # Its last fenced write, on its way out, still held the claim.
    assert Charge.objects.filter(step=stubborn.REFUSED).count() == 0


#: A job whose own SIGTERM handler stops its work: run_job() then returns.
HANDLING = {**HEEDING, "STUBBORN_HANDLES_SIGTERM": "1"}


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_started_directly_that_returns_after_its_timeouts_sigterm_is_recorded_timed_out():
    # Fails when a run that returned is a success however late: exit 0, "Ran".
    [instance] = start("stubborn", env=HANDLING)
    result = instance.finish(timeout=30)
    assert result.returncode == TIMED_OUT_STATUS, result
    assert "Ran stubborn" not in result.stdout
    assert (
        "was stopped at its timeout of 0:00:01.500000 (its run_job() returned after the "
        "SIGTERM); its claim is recorded timed out" in result.stderr
    ), result
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    assert run.error.startswith("jobclaims.exceptions.JobTimedOut: stopped at its timeout")
    assert states_of("stubborn") == {run.window: "timed-out"}
    assert cleaned_up(run)


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_that_returns_after_its_schedulers_timeout_sigterm_is_recorded_timed_out():
    # Fails when the scheduler leaves the success the run recorded after its stop.
    env = {**SCHEDULED, "STUBBORN_HANDLES_SIGTERM": "1"}
    [host] = start("jobclaims_scheduler", "--once", "--job", "stubborn", env=env)
    result = host.finish(timeout=60)
    assert result.returncode == 0, result
    assert "its claim is recorded timed out" in result.stderr + result.stdout, result
    run = the_run()
    assert run.status == JobRun.Status.TIMED_OUT
    assert run.error.startswith(
        "Timed out after 0:00:05: its scheduler sent it SIGTERM, and its run returned"
    ), run.error
    assert run.failures == 1
    assert cleaned_up(run)


#: A run blocked in one call (a socket read, a sleep) when its timeout comes.
BLOCKED = {**HEEDING, "STUBBORN_BLOCKS": "1"}


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_job_started_directly_blocked_in_a_call_is_stopped_at_its_timeout_every_time():
    # Fails when the process's SIGTERM goes to a thread other than the main
    # one: the blocked call runs on until the SIGKILL, the grace later,
    # without the job's clean-up (5 of 15 trials before the fix: 10 trials
    # all pass with it 1.7 % of the time).
    for trial in range(10):
        [instance] = start("stubborn", "--window", f"2026-12-02T05:{trial:02d}", env=BLOCKED)
        began = time.monotonic()
        result = instance.finish(timeout=30)
        took = time.monotonic() - began
        assert result.returncode == TIMED_OUT_STATUS, (trial, took, result)
        assert took < 10, (trial, took)  # Well before the grace ends.
        run = JobRun.objects.get(job="stubborn", window__startswith=f"2026-12-02T05:{trial:02d}")
        assert run.status == JobRun.Status.TIMED_OUT
        assert run.error.startswith("jobclaims.exceptions.JobTimedOut"), run.error
        assert cleaned_up(run), (trial, result)


@pytest.mark.parametrize(
    "timeout",
    [datetime.timedelta(), datetime.timedelta(seconds=-1), 30, "0:30:00"],
    ids=["zero", "negative", "a number", "a string"],
)
def test_a_timeout_that_is_not_a_positive_timedelta_is_refused_naming_the_fix(monkeypatch, timeout):
    monkeypatch.setattr(stubborn.Command, "timeout", timeout)
    _out, err, status = run_command("stubborn")
    assert status == 1
    assert err == (
        "stubborn: timeout must be a positive datetime.timedelta, or None for no timeout, "
        f"not {timeout!r}"
    )
    assert not JobRun.objects.exists()
    monkeypatch.setattr(stubborn.Command, "schedule", "* * * * *")
    assert schedules.problems(stubborn.Command) == [
        "stubborn: timeout must be a positive datetime.timedelta, or None for no timeout, "
        f"not {timeout!r}"
    ]


def test_a_negative_grace_is_refused_naming_the_fix(monkeypatch):
    monkeypatch.setattr(stubborn.Command, "timeout_grace", datetime.timedelta(seconds=-1))
    _, err, status = run_command("stubborn")
    assert (status, err) == (
        1,
        "stubborn: timeout_grace must be a datetime.timedelta of 0 or more, not "
        "datetime.timedelta(days=-1, seconds=86399)",
    )


def test_a_timeout_counts_against_the_retries_like_a_failure():
    run = JobRun.objects.claim("stubborn", "2026-12-02T05:00", lease=datetime.timedelta(minutes=1))
    assert run is not None
    policy = RetryPolicy(retries=1, backoff=datetime.timedelta())
    assert attempts.after_timeout(run, policy, "Timed out.") == JobRun.Status.RETRYING
    retry = JobRun.objects.claim(run.job, run.window, lease=datetime.timedelta(minutes=1))
    assert retry is not None
    assert attempts.after_timeout(retry, policy, "Timed out.") == JobRun.Status.TIMED_OUT
    assert JobRun.objects.get().failures == 2


def test_only_a_success_recorded_after_the_timeouts_sigterm_is_settled_timed_out():
    run = JobRun.objects.claim("stubborn", "2026-12-02T05:00", lease=datetime.timedelta(minutes=1))
    assert run is not None
    assert run.release()
    finished = JobRun.objects.get().finished_at
    assert finished is not None
    policy = RetryPolicy()
    # Sent after the success: the run had finished on its own.
    later = finished + datetime.timedelta(milliseconds=1)
    assert attempts.after_timeout(run, policy, "Timed out.", later) is None
    assert JobRun.objects.get().status == JobRun.Status.SUCCEEDED
    # Sent before: the run returned because of it.
    assert attempts.after_timeout(run, policy, "Timed out.", finished) == JobRun.Status.TIMED_OUT
    assert JobRun.objects.get().failures == 1


def test_the_job_is_not_scheduled_unless_a_test_says_so():
    assert "STUBBORN_SCHEDULE" not in os.environ
    assert stubborn.Command.schedule is None


@pytest.fixture
def slow_commits():
    """Make each commit that wrote a Charge take 0.3 s, in the server: a
    deferred trigger sleeps at COMMIT. The stubborn job then spends most of
    its time waiting for a COMMIT's answer, where a stop signal lands."""
    if connection.vendor != "postgresql":
        pytest.skip("a deferred trigger that sleeps at COMMIT is PostgreSQL's")
    table = Charge._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE OR REPLACE FUNCTION jobclaims_slow_commit() RETURNS trigger "
            "LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$"
        )
        cursor.execute(
            f"CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON {table} "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobclaims_slow_commit()"
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER slow_commit ON {table}")
        cursor.execute("DROP FUNCTION jobclaims_slow_commit()")


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
@pytest.mark.usefixtures("slow_commits")
def test_a_stop_that_comes_during_a_commit_waits_for_its_answer_and_the_clean_up_commits():
    # Fails when the SIGTERM of the timeout is raised inside psycopg's wait
    # for the COMMIT's answer: the connection is left mid-exchange, the
    # job's clean-up cannot write on it, and the grace's SIGKILL ends the
    # process (-9) with the clean-up lost (at the first trial, in 2 of 2
    # runs before the fix).
    for trial in range(3):
        [instance] = start("stubborn", "--window", f"2026-12-03T05:{trial:02d}", env=HEEDING)
        result = instance.finish(timeout=30)
        assert result.returncode == TIMED_OUT_STATUS, (trial, result)
        run = JobRun.objects.get(job="stubborn", window__startswith=f"2026-12-03T05:{trial:02d}")
        assert run.status == JobRun.Status.TIMED_OUT
        assert cleaned_up(run), (trial, result)


def stop_once_committing(backend: int) -> None:
    """SIGTERM the main thread once the server session ``backend`` sleeps
    in its commit (``slow_commits``): seen from a connection of its own."""
    main = threading.main_thread().ident
    assert main is not None
    sleeping = "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event = 'PgSleep'"
    try:
        with connection.cursor() as cursor:
            for _ in range(1000):
                cursor.execute(sleeping, [backend])
                if cursor.fetchone():
                    break
                time.sleep(0.005)
        signal.pthread_kill(main, signal.SIGTERM)
    finally:
        connection.close()


@pytest.mark.usefixtures("slow_commits")
def test_a_stop_during_a_commit_after_a_job_the_run_called_is_raised_once_it_committed():
    # Fails when the end of a job that the run called (nested) takes the
    # hold off the run's own commits: the SIGTERM is raised inside the wait
    # for the COMMIT's answer, and the write it was committing is lost.
    with interrupting_on_stop_signals():
        with interrupting_on_stop_signals():
            pass  # The job the run called, ended.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            [backend] = cursor.fetchone()
        threading.Thread(target=stop_once_committing, args=(backend,)).start()
        with pytest.raises(JobInterrupted), transaction.atomic():
            Charge.objects.create(job="nested", window="w", pid=os.getpid(), step=stubborn.FENCED)
    assert Charge.objects.filter(job="nested").exists()
