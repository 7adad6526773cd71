"""A scheduler stopped while it runs a fire: the fire still runs once, on some host.

Real schedulers on the test database, real signals; the runs are counted
from the job's own charges (slow_charge writes one as it starts, and one
when its work is done).
"""

from __future__ import annotations

import functools
import os
import signal
import time

import pytest

from jobclaims.models import JobRun
from jobclaims.testing import Instance, start
from tests.support.helpers import lines_until, wait_until
from tests.testapp.management.commands import stubborn
from tests.testapp.management.commands.slow_charge import DONE, STARTED
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

HOSTS = 4
#: How long slow_charge works: longer than the short grace, by enough that a
#: loaded machine still stops it mid-work; shorter than the long grace.
HOLD = "3"
SHORT_GRACE, LONG_GRACE = "0.5", "30"
#: Whom a stop signals: the scheduler, or the scheduler and the job it runs
#: at once, as systemd's default KillMode signals a whole control group.
Stop = tuple[signal.Signals, bool]
TO_THE_GROUP = True


def fire_in_progress(hosts: list[Instance]) -> tuple[str, Instance]:
    """A fire whose run starts after this call, and the live scheduler whose
    claim started it (its pid is in the claim's owner).

    Only a run that starts now: one already well into its work could end
    within a short grace, and there would be nothing to hand off.
    """
    found: list[tuple[str, Instance]] = []
    charges = Charge.objects.filter(job="slow_charge", step=STARTED)
    earlier = set(charges.values_list("window", flat=True))

    def running() -> bool:
        started = charges.exclude(window__in=earlier)
        for window in started.order_by("-pk").values_list("window", flat=True):
            run = JobRun.objects.get(job="slow_charge", window=window)
            if run.status != JobRun.Status.RUNNING or done(window):
                continue
            by_pid = {str(host.process.pid): host for host in hosts}
            if (host := by_pid.get(run.owner.split(":")[1])) is not None:
                found.append((window, host))
                return True
        return False

    wait_until(running, "a fire's run to start", timeout=40)
    return found[0]


def read_until(host: Instance, text: str, timeout: float = 60) -> list[str]:
    """The host's output lines up to the first holding ``text`` (``lines_until()``):
    a barrier on what the scheduler says, so that a second signal is not sent
    before the first was handled (two pending signals of one kind arrive as one)."""
    assert host.process.stdout is not None, "started with stdout=PIPE"
    return lines_until(host.process, host.process.stdout, text, timeout)


def done(window: str) -> list[Charge]:
    return list(Charge.objects.filter(job="slow_charge", window=window, step=DONE))


def has_ended(window: str) -> bool:
    return bool(done(window))


def stop_each(grace: str, stops: list[list[Stop]]) -> dict[str, tuple[str, Charge]]:
    """Start a fleet, stop the host running a fire with each list of signals
    in turn (not restarting it), and wait for each such fire to end.

    Returns, per fire, what its stopped host said and its run's start.
    """
    hosts = start(
        "jobclaims_scheduler",
        *("--job", "slow_charge", "--grace", grace),
        instances=HOSTS,
        env={"SLOW_HOLD": HOLD},
    )
    live = list(hosts)
    outcome: dict[str, tuple[str, Charge]] = {}
    try:
        for signals in stops:
            window, host = fire_in_progress(live)
            live.remove(host)
            said = []
            for signum, to_the_group in signals:
                if to_the_group:
                    os.kill(Charge.objects.get(window=window, step=STARTED).pid, signum)
                host.process.send_signal(signum)
                said += read_until(host, signum.name)
            # Not restarted: the fire's end comes from this host or another.
            wait_until(functools.partial(has_ended, window), f"{window} to run to its end", 40)
            result = host.finish(timeout=40)
            assert result.returncode == 0, result
            (started,) = Charge.objects.filter(job="slow_charge", window=window, step=STARTED)[:1]
            outcome[window] = ("".join(said) + result.stdout + result.stderr, started)
        for host in live:
            host.process.send_signal(signal.SIGTERM)
            read_until(host, "SIGTERM")
            host.process.send_signal(signal.SIGTERM)
            host.finish(timeout=40)
    finally:
        for host in hosts:
            host.stop()
    return outcome


def assert_ran_once_to_the_end(window: str) -> Charge:
    charges = Charge.objects.filter(job="slow_charge", window=window)
    ends = done(window)
    assert len(ends) == 1, list(charges.values_list("pid", "attempt", "step"))
    (charge,) = ends
    run = JobRun.objects.get(job="slow_charge", window=window)
    assert run.status == JobRun.Status.SUCCEEDED
    return charge


@pytest.mark.xdist_group("fleets")
def test_fires_whose_schedulers_stop_in_turn_each_run_once_on_the_hosts_left():
    # Three of four hosts stopped one after the other while running a fire,
    # each with a grace shorter than the job: each fire is handed off. The
    # third stop signals its job too, as systemd does by default.
    stops: list[list[Stop]] = [
        [(signal.SIGTERM, False)],
        [(signal.SIGINT, False)],
        [(signal.SIGTERM, TO_THE_GROUP)],
    ]
    outcome = stop_each(SHORT_GRACE, stops)

    assert len(outcome) == 3
    for window, (said, started) in outcome.items():
        charge = assert_ran_once_to_the_end(window)
        assert "handed off to the next scheduler" in said, said
        assert charge.pid != started.pid
        run = JobRun.objects.get(job="slow_charge", window=window)
        # Interrupted by a stop: attempt 2, and no failure counted.
        assert (charge.attempt, run.attempt, run.failures) == (2, 2, 0)


@pytest.mark.xdist_group("fleets")
def test_a_stopped_scheduler_lets_its_job_finish_in_the_grace_and_a_second_signal_hands_off():
    once, twice = [(signal.SIGTERM, False)], [(signal.SIGINT, False), (signal.SIGINT, False)]
    outcome = stop_each(LONG_GRACE, [once, twice])

    (finished, (said, started)), (interrupted, (said_twice, _)) = outcome.items()
    charge = assert_ran_once_to_the_end(finished)
    assert "handed off" not in said
    assert (charge.attempt, charge.pid) == (1, started.pid)
    assert "SIGINT again: passing it on" in said_twice
    assert "handed off to the next scheduler" in said_twice
    assert assert_ran_once_to_the_end(interrupted).attempt == 2


@pytest.mark.xdist_group("fleets")
def test_a_job_that_ignores_the_stop_passed_on_is_killed_after_its_grace_and_handed_off():
    # A job stuck in a call ignores SIGTERM. Its scheduler, stopped, must
    # still end: it kills the job its grace after the stop reached it, and
    # hands the fire off. The stop comes with a burst of SIGTERMs, as from
    # an impatient operator, that lasts until the scheduler has exited: each
    # lands at some bytecode of the scheduler's wait, and a handler that took
    # a lock there (an Event's) hung it; one landing after the hand-off, as
    # the process ends, must not turn its clean exit into a kill.
    env = {"STUBBORN_SCHEDULE": "* * * * *", "STUBBORN_IGNORES_SIGTERM": "1", "STUBBORN_GRACE": "2"}
    [host] = start("jobclaims_scheduler", "--once", "--job", "stubborn", "--grace", "30", env=env)
    started = Charge.objects.filter(job="stubborn", step=stubborn.STARTED)
    try:
        wait_until(started.exists, "the stubborn job to start", timeout=40)
        host.process.send_signal(signal.SIGTERM)
        said = read_until(host, "SIGTERM")
        sent_at = time.monotonic()
        while host.process.poll() is None and time.monotonic() - sent_at < 40:
            host.process.send_signal(signal.SIGTERM)
            time.sleep(0.002)
        result = host.finish(timeout=40)
        took = time.monotonic() - sent_at
    finally:
        host.stop()

    assert result.returncode == 0, result
    output = "".join(said) + result.stdout + result.stderr
    assert "SIGTERM again: passing it on to the running jobs" in output
    assert f"after its SIGTERM: sent pid {started.get().pid} SIGKILL" in output
    assert "handed off to the next scheduler" in output
    # Its job's grace after the stop reached it, not the scheduler's 30 s.
    assert took < 20, took
    run = JobRun.objects.get(job="stubborn")
    assert (run.status, run.failures) == (JobRun.Status.RETRYING, 0)
    assert not Charge.objects.filter(job="stubborn", step=stubborn.CLEANED).exists()
