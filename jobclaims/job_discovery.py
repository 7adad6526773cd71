"""Which jobs the code defines and schedules: the ``JobCommand`` management commands.

The scheduler, health, the admin and the operators' commands all ask here,
so that they agree on which jobs exist and what each one's schedules are.
"""

from __future__ import annotations

from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand

from jobclaims.commands import JobCommand
from jobclaims.schedules import JobSchedule


def job_commands() -> dict[str, JobCommand]:
    """Every management command that is a ``JobCommand``, by command name."""
    found = {}
    for name, app in sorted(get_commands().items()):
        command = app if isinstance(app, BaseCommand) else load_command_class(app, name)
        if isinstance(command, JobCommand):
            found[name] = command
    return found


def scheduled_commands() -> dict[str, JobCommand]:
    """Every management command that is a ``JobCommand`` with a schedule, by name.

    An empty schedule is one too, for ``JobSchedule.of()`` to refuse: a job
    must not go unscheduled for want of a cron expression.
    """
    return {
        name: each
        for name, each in job_commands().items()
        if each.schedule is not None or each.schedules
    }


def jobs_in_code() -> set[str]:
    """The names every ``JobCommand`` of this code claims under, scheduled or
    not: each schedule's of a job with several."""
    names = {command.job_name or name for name, command in job_commands().items()}
    jobs, _ = usable_jobs()
    return names | {job.job for job in jobs}


def scheduled_jobs() -> list[JobSchedule]:
    """Each schedule of every scheduled job: one per schedule of a job with several.

    Raises ``ValueError`` naming the fix for a schedule that cannot be used.
    """
    return [
        job
        for name, command in scheduled_commands().items()
        for job in JobSchedule.each_of(command, name)
    ]


def schedules_of(command: str) -> list[JobSchedule]:
    """Each schedule of the job whose management command is ``command``;
    ``ValueError`` naming the fix if they cannot be used, none for a job
    without a schedule."""
    found = scheduled_commands().get(command)
    return [] if found is None else JobSchedule.each_of(found, command)


def usable_jobs() -> tuple[list[JobSchedule], dict[str, str]]:
    """Each schedule of every scheduled job that has usable ones, and by
    command what is wrong with each other job, naming the fix: one job's
    mistake does not keep the others from running."""
    jobs, problems = [], {}
    for name, command in scheduled_commands().items():
        try:
            jobs.extend(JobSchedule.each_of(command, name))
        except ValueError as error:
            problems[name] = str(error)
    return jobs, problems


def schedule_of(job: str) -> JobSchedule | None:
    """The schedule of the job whose claims are named ``job``, if it has a usable one."""
    try:
        jobs = scheduled_jobs()
    except ValueError:
        return None  # Check W005 reports it.
    return next((each for each in jobs if each.job == job), None)
