"""A scheduler forks each won fire's job from its fork server, with real processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from jobclaims.models import JobRun
from jobclaims.testing import start
from tests.support.helpers import is_gone, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def probe_env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"PROBE_SCHEDULE": "* * * * *", "PROBE_FILE": str(tmp_path / "runs"), **more}


def probed(tmp_path: Path) -> list[dict[str, Any]]:
    """How each run of the probe job started, one entry per run."""
    path = tmp_path / "runs"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_fire_is_forked_with_the_job_loaded_and_starts_as_a_process_of_its_own(tmp_path):
    env = probe_env(tmp_path, PROBE_VARIABLE="from the scheduler's environment")
    [host] = start("jobclaims_scheduler", "--once", "--job", "forked_probe", env=env)
    result = host.finish(timeout=60)
    assert result.returncode == 0, result
    [run] = probed(tmp_path)
    # Its module was imported once, by the fork server, not by the job's process.
    assert run["loaded_by"] != run["pid"]
    assert run["parent"] == run["loaded_by"] != host.process.pid
    # What a process the scheduler started gets, forked or not.
    assert run["session"] == run["pid"]
    assert run["stdin"] == os.devnull
    assert run["variable"] == "from the scheduler's environment"
    assert run["argv"][0].endswith("django/__main__.py")
    assert run["argv"][1:3] == ["forked_probe", "--window"]
    assert JobRun.objects.get(job="forked_probe").status == JobRun.Status.SUCCEEDED
    assert f"pid {run['pid']} exited 0" in result.stdout
    # The fork server ends with its scheduler: no process is left behind.
    wait_until(lambda: is_gone(int(run["loaded_by"])), "the fork server to exit", timeout=10)


# Timed to the second: never beside another fleet of processes.
@pytest.mark.xdist_group("fleets")
def test_a_fire_due_while_its_fork_server_loads_starts_fresh_well_within_its_claim(tmp_path):
    # Fails when a start waits for the server's load however long it takes:
    # nothing renews the 10 s claim until the job's process starts, 30 s
    # into the load, long after another host could have taken the fire over.
    env = probe_env(tmp_path, PROBE_LEASE="10", PROBE_LOAD_HOLD="30")
    [host] = start("jobclaims_scheduler", "--once", "--job", "forked_probe", env=env)
    result = host.finish(timeout=60)
    assert result.returncode == 0, result
    [run] = runs_probed(tmp_path)
    assert run["loaded_by"] == run["pid"], "a fresh interpreter"
    claim = JobRun.objects.get(job="forked_probe")
    assert claim.status == JobRun.Status.SUCCEEDED
    # Half of the claim waited for the load at most, then a fresh start.
    assert run["at"] - claim.claimed_at.timestamp() < 10, (run, claim.claimed_at)
    assert (
        f"The fork server is still loading the jobs: forked_probe {claim.window} starts in a "
        "fresh interpreter"
    ) in result.stderr, result


def test_a_job_that_asks_for_a_fresh_interpreter_gets_one_at_each_fire(tmp_path):
    env = probe_env(tmp_path, PROBE_FRESH="1")
    [host] = start("jobclaims_scheduler", "--once", "--job", "forked_probe", env=env)
    result = host.finish(timeout=60)
    assert result.returncode == 0, result
    [run] = probed(tmp_path)
    assert run["loaded_by"] == run["pid"]
    assert run["parent"] == host.process.pid
    assert run["argv"][0].endswith("django/__main__.py")
    assert JobRun.objects.get(job="forked_probe").status == JobRun.Status.SUCCEEDED


def test_a_fork_server_killed_under_a_running_job_leaves_its_fire_settled_and_the_next_started(
    tmp_path,
):
    # Fails when the scheduler waits forever for the exit its fork server
    # would have sent, or stops starting jobs with it gone.
    env = probe_env(tmp_path, PROBE_SCHEDULE="*/3 * * * * *", PROBE_HOLD="4")
    [host] = start("jobclaims_scheduler", "--job", "forked_probe", env=env)
    try:
        wait_until(lambda: len(probed(tmp_path)) >= 1, "the first fire to start")
        [first] = probed(tmp_path)
        os.kill(int(first["parent"]), signal.SIGKILL)
        wait_until(lambda: len(probed(tmp_path)) >= 3, "two more fires to start", timeout=40)
        wait_until(lambda: is_gone(int(first["pid"])), "the first run to end")
        later = probed(tmp_path)[1:]
        # Each later fire runs in a fresh interpreter of its own.
        assert all(run["loaded_by"] == run["pid"] for run in later), later
        assert all(run["parent"] == host.process.pid for run in later), later
        first_run = JobRun.objects.get(job="forked_probe", window=first["window"])
        wait_until(
            lambda: JobRun.objects.get(pk=first_run.pk).status != JobRun.Status.RUNNING,
            "the first run to be recorded",
        )
        assert JobRun.objects.get(pk=first_run.pk).status == JobRun.Status.SUCCEEDED
    finally:
        host.process.send_signal(signal.SIGTERM)
        result = host.finish(timeout=60)
    assert "exit status was lost: its fork server died before it" in result.stderr, result
    assert "from now on each job starts in a fresh interpreter" in result.stderr


def runs_probed(tmp_path: Path) -> list[dict[str, Any]]:
    """The probe's runs, without the lines its fork hooks wrote."""
    return [entry for entry in probed(tmp_path) if "window" in entry]


def test_a_fork_server_killed_before_it_answers_leaves_its_fire_to_one_process(tmp_path):
    # Fails when the job the server forked runs although the scheduler never
    # learned of it, beside the fresh interpreter the scheduler starts for
    # the same fire in its place: the fire runs twice, or (once the first
    # has ended) once out of the scheduler's sight.
    env = probe_env(
        tmp_path, PROBE_SCHEDULE="*/2 * * * * *", PROBE_HOLD="5", PROBE_FORK_HOLD_PARENT="30"
    )
    [host] = start("jobclaims_scheduler", "--job", "forked_probe", env=env)
    try:
        wait_until(lambda: bool(probed(tmp_path)), "the fork server to fork the first fire")
        [held] = probed(tmp_path)
        os.kill(held["pid"], signal.SIGKILL)
        run = JobRun.objects.get(job="forked_probe")
        wait_until(
            lambda: JobRun.objects.get(pk=run.pk).status != JobRun.Status.RUNNING,
            "the fire's run to end",
            timeout=40,
        )
    finally:
        host.process.send_signal(signal.SIGTERM)
        host.finish(timeout=60)
    [ran] = [each for each in runs_probed(tmp_path) if each["window"] == run.window]
    assert ran["loaded_by"] == ran["pid"], "started by its scheduler, in a fresh interpreter"
    assert JobRun.objects.get(pk=run.pk).status == JobRun.Status.SUCCEEDED


def test_a_stop_passed_on_as_a_forked_job_starts_stops_it_as_a_fresh_one(tmp_path):
    # Fails when the job ignores the SIGTERM its scheduler passes on before
    # it has left the fork server's ways (which ignore SIGTERM): the stop
    # then waits for the whole run, instead of handing the fire off.
    env = probe_env(
        tmp_path, PROBE_SCHEDULE="*/2 * * * * *", PROBE_HOLD="60", PROBE_FORK_HOLD_CHILD="3"
    )
    [host] = start("jobclaims_scheduler", "--job", "forked_probe", "--grace", "0", env=env)
    try:
        wait_until(lambda: bool(probed(tmp_path)), "a forked job to be held up after its fork")
        host.process.send_signal(signal.SIGTERM)
        result = host.finish(timeout=30)
    finally:
        host.stop()
    assert result.returncode == 0, result
    assert "handed off to the next scheduler" in result.stdout + result.stderr, result
    assert runs_probed(tmp_path) == []
    [run] = JobRun.objects.filter(job="forked_probe")
    assert (run.status, run.failures) == (JobRun.Status.RETRYING, 0)


def waits_for_requests(pid: int) -> bool:
    """Whether process ``pid`` sleeps in select() with no socket open but
    its scheduler's: a fork server that has loaded the jobs and told its
    scheduler so, not one that waits on the database it warms up to."""
    waits_in = Path(f"/proc/{pid}/wchan").read_text()
    return ("poll" in waits_in or "select" in waits_in) and open_sockets(pid) == 1


def open_sockets(pid: int) -> int:
    opened = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # Closed as it was looked at.
            opened += os.readlink(fd).startswith("socket:")
    return opened


def fork_server_of(host: Any) -> int:
    """The pid of ``host``'s fork server: its scheduler's first child."""
    children = Path(f"/proc/{host.process.pid}/task/{host.process.pid}/children")
    wait_until(lambda: bool(children.read_text().split()), "the fork server to start")
    return int(children.read_text().split()[0])


def loading(tmp_path: Path, server: int) -> None:
    wait_until(lambda: {"loading": server} in probed(tmp_path), "the fork server to load the jobs")


def loaded(tmp_path: Path, server: int) -> None:
    wait_until(lambda: waits_for_requests(server), "the fork server to load the jobs")


@pytest.mark.parametrize("stopped", [loading, loaded])
def test_a_scheduler_stopped_before_its_first_forked_start_stops_quietly(tmp_path, stopped):
    # Fails when the fork server dies of the pipe its scheduler closed
    # before the server was ready, or of the reset the scheduler's socket
    # sends as it closes with the server's "ready" unread: a traceback in
    # every idle scheduler's stop.
    env = probe_env(tmp_path, PROBE_SCHEDULE="0 0 1 1 *", PROBE_LOAD_HOLD="2")
    [host] = start("jobclaims_scheduler", "--job", "forked_probe", env=env)
    try:
        server = fork_server_of(host)
        stopped(tmp_path, server)
        host.process.send_signal(signal.SIGTERM)
        result = host.finish(timeout=30)
    finally:
        host.stop()
    assert result.returncode == 0, result
    assert "Traceback" not in result.stderr, result
    assert result.stderr == "", result
    assert not runs_probed(tmp_path)
    wait_until(lambda: is_gone(server), "the fork server to exit", timeout=10)
