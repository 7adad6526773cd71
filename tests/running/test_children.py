"""The processes jobclaims starts work on their parent's databases, and
write nothing into ``django.conf.settings`` to get there.

Each process here runs with its settings frozen
(tests/testapp/frozen_settings.py): a write into a setting, or into a dict
one holds such as ``DATABASES["default"]``, raises there. The names of this
test run's databases are not in the settings, so every process must still
find them, in every thread it opens a connection from. A scan of the
package's source covers the paths those processes do not take.
"""

from __future__ import annotations

import ast
import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

import jobclaims
from jobclaims.models import JobRun
from jobclaims.scheduling.launch import job_environment
from jobclaims.testing import (
    assert_ran_once,
    child_environment,
    race,
    schedules_in_force_since,
    start,
)
from jobclaims.time.clock import database_now
from tests.support.helpers import wait_until
from tests.testapp.models import Charge

FROZEN = {"TESTAPP_FROZEN_SETTINGS": "1"}
SECOND = datetime.timedelta(seconds=1)


@pytest.mark.django_db(transaction=True)
def test_a_write_into_the_settings_fails_a_frozen_process():
    # What jobclaims once did to open its parent's test database.
    written = (
        "import django\n"
        "django.setup()\n"
        "from django.db import connections\n"
        "connections['default'].settings_dict['NAME'] = 'elsewhere'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", written],
        env={**os.environ, **child_environment(), **FROZEN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "SettingsWritten: settings.DATABASES['default'] was written" in done.stderr


@pytest.mark.django_db(transaction=True)
def test_raced_instances_claim_on_the_test_database():
    results = race("charge_ledger", "--window", "2026-11-29T10:00", env=FROZEN)
    assert_ran_once(results)
    assert Charge.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_scheduler_and_its_job_run_on_the_test_database():
    schedules_in_force_since(datetime.timedelta(days=30))
    [host] = start("jobclaims_scheduler", "--once", "--job", "nightly_latest", env=FROZEN)
    result = host.finish(timeout=60)
    assert result.returncode == 0, result
    # The job's process adopted the scheduler's claim and recorded its outcome.
    run = JobRun.objects.get(job="nightly_latest")
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    assert list(Charge.objects.values_list("window", flat=True)) == [run.window]


@pytest.mark.django_db(transaction=True)
def test_a_jobs_heartbeat_renews_on_the_test_database():
    # Long enough for a loaded machine to start the job before it ends.
    run = JobRun.objects.claim("tick", "2026-11-29T10:00:00+00:00", lease=20 * SECOND)
    assert run is not None
    claimed_until = run.expires_at
    # A three-second lease that only the heartbeat's thread keeps renewing.
    [job] = start(
        "tick",
        *("--window", run.window, "--claim-token", str(run.token), "--lease", "3"),
        env={**FROZEN, "TICK_HOLD": "25"},
    )
    wait_until(Charge.objects.exists, "the job to start", timeout=60)
    # Past the lease the claim took, the run holds only what it renewed.
    wait_until(lambda: database_now() > claimed_until + SECOND, "the claim's lease to end", 30)

    run.refresh_from_db()
    assert run.expires_at > database_now()
    assert JobRun.objects.claim("tick", run.window, lease=5 * SECOND) is None
    result = job.finish(timeout=30)
    assert result.returncode == 0, result
    run.refresh_from_db()
    assert run.status == JobRun.Status.SUCCEEDED


def _writes_into_settings(source: str) -> list[int]:
    """The lines of ``source`` that assign or delete into ``django.conf.settings``,
    by whatever name the module imported it as."""
    tree = ast.parse(source)
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "django.conf"
        for alias in node.names
        if alias.name == "settings"
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            root = target
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if root is not target and isinstance(root, ast.Name) and root.id in names:
                found.append(node.lineno)
    return found


def test_no_module_of_the_package_assigns_into_the_settings():
    """The processes above take the paths a test runs; this reads every other."""
    package = Path(jobclaims.__file__).parent
    written = {
        str(path.relative_to(package)): lines
        for path in sorted(package.rglob("*.py"))
        if (lines := _writes_into_settings(path.read_text()))
    }
    assert written == {}


def test_an_assignment_into_the_settings_would_be_found():
    source = (
        "from django.conf import settings as django_settings\n"
        "django_settings.DATABASES['default']['NAME'] = 'elsewhere'\n"
    )
    assert _writes_into_settings(source) == [2]


def test_a_job_started_under_override_settings_is_told_the_settings_module():
    # A live test server runs its views under override_settings, whose
    # settings name no module: the admin's Run now starts jobs from there.
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        assert job_environment()["DJANGO_SETTINGS_MODULE"] == "tests.settings"


def test_a_schedules_child_is_started_with_its_arguments_and_its_name_whatever_it_looks_like():
    import dataclasses

    from django.core.management import load_command_class

    from jobclaims.jobs.discovery import scheduled_jobs
    from jobclaims.scheduling.launch import job_argv

    job = next(job for job in scheduled_jobs() if job.job == "sync_regions[--region eu]")
    # A name that reads like an option is still one argument of --schedule-name.
    odd = dataclasses.replace(job, name="--dry-run", args=("--region", "eu"))
    run = JobRun(job=odd.job, window="2026-11-29T10:00+00:00")
    argv = job_argv(odd, run.window, run)
    command = load_command_class("tests.testapp", "sync_regions")
    options = command.create_parser("manage.py", "sync_regions").parse_args(argv[4:])
    assert (options.region, options.schedule_name) == ("eu", "--dry-run")
    assert options.window_key == run.window
