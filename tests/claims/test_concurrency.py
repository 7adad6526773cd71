"""Real OS processes of a real job, racing on one database.

Each instance is a separate Python process running ``manage.py
charge_ledger``; they are held at a starting line (a pipe) until all are
connected, then released at the same instant. The ledger of charges is the
outcome a user cares about: one charge per window, however many instances.
"""

from __future__ import annotations

import os
import signal

import pytest

from jobclaims.models import JobRun, JobSkip
from jobclaims.testing import Instance, StartingLine, race, start
from tests.support.factories import stored_with_skips
from tests.support.helpers import outcomes, wait_until
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = "2026-11-29T10:00+00:00"


@pytest.mark.parametrize("trial", range(30))
def test_two_instances_released_together_charge_once(trial):
    window = f"2026-11-29T{trial % 24:02d}:00"
    results = race("charge_ledger", "--window", window, instances=2)
    assert outcomes(results) == {"ran": 1, "skipped": 1}, results
    assert Charge.objects.count() == 1
    run = JobRun.objects.get()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 1)


def test_eight_instances_released_together_charge_once():
    results = race("charge_ledger", "--window", WINDOW, "--hold", "0.2", instances=8)
    assert outcomes(results) == {"ran": 1, "skipped": 7}, results
    assert Charge.objects.count() == 1
    assert stored_with_skips().skips == 7
    # The seven losers counted themselves on a row per reason, none lost.
    counts = dict(JobSkip.objects.values_list("reason", "count"))
    assert sum(counts.values()) == 7
    assert set(counts) <= {"held", "succeeded"}


def test_two_windows_of_one_job_released_together_run_one():
    line = StartingLine()
    group = [
        Instance("charge_ledger", "--window", window, "--hold", "1", line=line)
        for window in ("2026-11-29T08:00", "2026-11-29T09:00")
    ]
    for instance in group:
        instance.wait_ready()
    line.release()
    results = [instance.finish() for instance in group]
    assert outcomes(results) == {"ran": 1, "skipped": 1}, results
    assert Charge.objects.count() == 1


def test_a_succeeded_window_is_skipped_by_later_instances_unless_forced():
    assert outcomes(race("charge_ledger", "--window", WINDOW, instances=1)) == {"ran": 1}
    [skipped] = race("charge_ledger", "--window", WINDOW, instances=1)
    assert "already succeeded" in skipped.stdout
    results = race("charge_ledger", "--window", WINDOW, "--force", "--hold", "0.5", instances=2)
    assert outcomes(results) == {"ran": 1, "skipped": 1}, results
    assert Charge.objects.count() == 2
    assert JobRun.objects.get().attempt == 2


def test_a_killed_holder_blocks_its_window_until_the_lease_ends_then_is_taken_over():
    [holder] = start("charge_ledger", "--window", WINDOW, "--lease", "8", "--hold", "60")
    wait_until(Charge.objects.exists, "the first instance to start charging")
    os.kill(holder.process.pid, signal.SIGKILL)
    assert holder.finish().returncode == -signal.SIGKILL

    [early] = race("charge_ledger", "--window", WINDOW, instances=1)
    assert early.outcome == "skipped"
    assert "held by" in early.stdout

    wait_until(JobRun.objects.expired().exists, "the dead holder's lease to end")
    [successor] = race("charge_ledger", "--window", WINDOW, instances=1)
    assert successor.outcome == "ran", successor
    run = JobRun.objects.get()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 2)


def test_a_failed_run_exits_non_zero_and_the_next_instance_retries_it():
    [failed] = race("charge_ledger", "--window", WINDOW, "--fail", instances=1)
    assert failed.returncode == 1
    assert "RuntimeError: the payment provider is down" in failed.stderr
    assert JobRun.objects.get().status == JobRun.Status.FAILED

    [retry] = race("charge_ledger", "--window", WINDOW, instances=1)
    assert retry.outcome == "ran", retry
    run = JobRun.objects.get()
    assert (run.status, run.attempt) == (JobRun.Status.SUCCEEDED, 2)


def test_another_window_skips_while_a_run_of_the_job_holds_it():
    # The 08:00 run hangs until the test wakes it, however slow the machine.
    [first] = start("charge_hung", "--window", "2026-11-29T08:00")
    wait_until(Charge.objects.exists, "the 08:00 run to start")
    [second] = race("charge_hung", "--window", "2026-11-29T09:00", "--hang", "0", instances=1)
    assert second.outcome == "skipped"
    assert "the 2026-11-29T08:00+00:00 run" in second.stdout
    first.process.send_signal(signal.SIGUSR1)
    assert first.finish().returncode == 0

    [later] = race("charge_hung", "--window", "2026-11-29T09:00", "--hang", "0", instances=1)
    assert later.outcome == "ran", later
    assert Charge.objects.count() == 2


def test_allow_overlap_runs_another_window_while_the_first_still_runs():
    [first] = start("charge_overlapping", "--window", "2026-11-29T08:00", "--hold", "12")
    wait_until(Charge.objects.exists, "the 08:00 run to start")
    [second] = race("charge_overlapping", "--window", "2026-11-29T09:00", instances=1)
    assert second.outcome == "ran", second
    assert first.process.poll() is None, "the first run should still be running"
    assert first.finish().returncode == 0
    assert Charge.objects.count() == 2


def test_from_cron_at_verbosity_zero_the_skipper_says_nothing_and_the_runner_only_the_job():
    # --hold keeps the winner's claim past the other's start: that one skips.
    results = race("charge_ledger", "--window", WINDOW, "--hold", "1", "-v", "0", instances=2)
    runner, skipper = sorted(results, key=lambda result: result.stdout == "")
    assert (runner.returncode, runner.stdout, runner.stderr) == (0, "charging as attempt 1\n", "")
    assert (skipper.returncode, skipper.stdout, skipper.stderr) == (0, "", "")
    assert Charge.objects.count() == 1
    assert stored_with_skips().skips == 1
