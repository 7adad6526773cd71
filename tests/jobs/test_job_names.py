"""Which jobs exist: one job, one name.

Two ``JobCommand``s that claim under one name would be one job to their
claims, each skipping the other's runs as its own. Real processes, with a
deploy whose ``rescheduled`` job sets ``job_name = "tick"``, the name of
another scheduled job of the test project.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobclaims.jobs import discovery
from jobclaims.jobs.commands import JobCommand
from jobclaims.models import JobRun
from jobclaims.testing import child_environment, race
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db(transaction=True)

#: A deploy in which ``rescheduled`` claims under ``tick``'s name, every three seconds.
SHARING = {"RESCHEDULED_JOB_NAME": "tick", "RESCHEDULED_SCHEDULE": "*/3 * * * * *"}

PROBLEM = (
    "the commands rescheduled and tick both claim their runs as 'tick', so each would skip "
    "the other's runs as its own"
)
FIX = (
    "give each JobCommand its own job_name (or remove job_name, to claim under the command's "
    "own name)"
)


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m django *args`` in a deploy of ``SHARING``."""
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        env={**os.environ, **child_environment(), **SHARING},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_two_commands_with_one_job_name_fail_the_check_naming_both_and_the_fix():
    checked = manage("check", "--tag", "jobclaims")

    assert checked.returncode == 1, checked
    assert (
        "(jobclaims.E010) The commands rescheduled and tick both claim their runs as 'tick', "
        "so each would skip the other's runs as its own.\n\tHINT: Give each JobCommand its own "
        "job_name (or remove job_name, to claim under the command's own name). See "
        "https://jobclaims.readthedocs.io/en/stable/checks.html"
        "#jobclaims-e010-two-jobs-claim-under-one-name."
    ) in checked.stderr


def test_a_run_of_either_from_cron_is_refused_and_another_job_runs():
    for command in ("rescheduled", "tick"):
        [refused] = race(command, "--window", "2026-11-29T10:00:00", instances=1, env=SHARING)
        assert refused.returncode == 1, refused
        assert f"(jobclaims.E010) The {PROBLEM[4:]}." in refused.stderr
    assert not JobRun.objects.exists()
    assert not Charge.objects.exists()

    [other] = race("charge_ledger", instances=1, env=SHARING)
    assert other.returncode == 0, other
    assert Charge.objects.count() == 1


def test_the_scheduler_leaves_both_out_naming_them_and_refuses_them_by_name():
    [left_out] = race(
        "jobclaims_scheduler", "--once", "--job", "nightly_latest", instances=1, env=SHARING
    )
    assert left_out.returncode == 0, left_out
    for command in ("rescheduled", "tick"):
        assert f"{command}: {PROBLEM}; {FIX}; this job is left out until it is fixed" in (
            left_out.stderr
        )

    [chosen] = race("jobclaims_scheduler", "--once", "--job", "tick", instances=1, env=SHARING)
    assert chosen.returncode == 1, chosen
    assert f"CommandError: tick: {PROBLEM}; {FIX}" in chosen.stderr
    assert not JobRun.objects.filter(job="tick").exists()


def command_named(module: str, **attributes: object) -> JobCommand:
    command_class: type[JobCommand] = type(
        "Command", (JobCommand,), {"__module__": f"app.commands.{module}", **attributes}
    )
    return command_class()


@pytest.mark.django_db(transaction=False)
def test_a_job_name_equal_to_another_commands_name_or_schedules_name_is_shared(monkeypatch):
    commands = {
        "report": command_named("report"),
        "sched_a": command_named("sched_a", job_name="report"),
        "sched_b": command_named("sched_b", job_name="report"),
        "alone": command_named("alone", job_name="by_itself"),
    }
    monkeypatch.setattr(discovery, "job_commands", lambda: commands)

    assert discovery.shared_names() == {"report": ["report", "sched_a", "sched_b"]}
    assert discovery.shared_name_problem("report", ["report", "sched_a", "sched_b"]) == (
        "the commands report, sched_a and sched_b all claim their runs as 'report', so each "
        "would skip the other's runs as its own"
    )
