"""A Django task (Django 6.0+) whose work is claimed once per window."""

from django.tasks import task

from jobclaims.claiming import claimed


@task
@claimed("nightly_export", window="daily")
def nightly_export() -> str:
    return "exported"


@task
def unclaimed_export() -> str:
    """A task that tests/test_claiming.py tries to wrap in @claimed, the wrong way round."""
    return "exported"
