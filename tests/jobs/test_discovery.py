"""Which jobs exist has one answer, that every command, health and the admin ask.

``charge_ledger`` is a ``JobCommand`` with no schedule that never ran: it has
no claim, no pause and no row a deploy wrote. It exists all the same, because
the code defines it, and a name no job has is refused alike everywhere.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from jobclaims import UnknownJob, known_jobs, retire
from jobclaims.jobs import discovery
from jobclaims.models import JobPause, JobRun, KnownCommand, RetiredJob, ScheduleVersion
from tests.support.helpers import run_command
from tests.testapp.models import Charge

pytestmark = pytest.mark.django_db

NEVER_RAN = "charge_ledger"


@pytest.fixture
def never_ran() -> str:
    KnownCommand.objects.all().delete()  # What migrate recorded for the test database.
    assert not JobRun.objects.filter(job=NEVER_RAN).exists()
    assert not JobPause.objects.filter(job=NEVER_RAN).exists()
    return NEVER_RAN


def test_an_unscheduled_command_that_never_ran_is_known(never_ran):
    assert never_ran in known_jobs()
    discovery.require_known(never_ran)


def test_pause_and_resume_know_it(never_ran):
    assert run_command("jobclaims_pause", never_ran, "--reason", "the bank is down")[2] == 0
    assert JobPause.objects.in_force().filter(job=never_ran).exists()
    assert run_command("jobclaims_resume", never_ran)[2] == 0
    assert not JobPause.objects.in_force().filter(job=never_ran).exists()


def test_run_now_knows_it(never_ran):
    _out, err, status = run_command("jobclaims_run", never_ran)
    assert status == 0, err
    assert Charge.objects.count() == 1


def test_retire_knows_it(never_ran):
    _out, err, status = run_command("jobclaims_retire", never_ran)
    assert (status, err) == (0, "")
    assert RetiredJob.objects.filter(job=never_ran).exists()


def test_health_knows_it_and_finds_nothing_wrong(never_ran):
    out, err, status = run_command("jobclaims_status", "--check", "--job", never_ran)
    assert (status, err) == (0, "")
    assert "not a known job" not in out


def test_the_admin_knows_it():
    operator = User.objects.create_user("carol", is_staff=True)
    operator.user_permissions.set(
        Permission.objects.filter(codename__in=["view_jobpause", "add_jobpause"])
    )
    client = Client()
    client.force_login(operator)
    response = client.post(
        reverse("admin:jobclaims_jobpause_add"),
        {"job": NEVER_RAN, "reason": "the bank is down", "until": ""},
    )
    assert response.status_code == 302, response.content.decode()
    assert JobPause.objects.get().job == NEVER_RAN


def test_a_job_removed_from_the_code_is_known_while_its_rows_remember_it():
    ScheduleVersion.objects.create(job="renamed_away", fingerprint="f", schedule="0 * * * *")
    assert "renamed_away" in known_jobs()
    retire("renamed_away", "carol")


def test_a_name_no_job_has_is_refused_alike_with_the_one_unknown_job():
    for refused in (
        lambda: retire("charge_ledgr", "carol"),
        lambda: discovery.require_known("charge_ledgr"),
    ):
        with pytest.raises(UnknownJob, match="no job is named 'charge_ledgr'; name one of: "):
            refused()
    assert issubclass(UnknownJob, LookupError)
    for command in ("jobclaims_pause", "jobclaims_resume", "jobclaims_retire"):
        _out, err, status = run_command(command, "charge_ledgr")
        assert status == 1
        assert "no job is named 'charge_ledgr'; name one of: " in err
        assert NEVER_RAN in err
    assert not JobPause.objects.exists()
    assert not RetiredJob.objects.exists()
