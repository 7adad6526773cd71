"""Which jobs exist: the one answer every command, health, the admin and the checks ask.

A job exists when the code defines it (a ``JobCommand``, under its claim
name and each of its schedules' own, a Celery task based on ``ClaimedTask``,
or a task schedule, ``jobclaims.scheduled()`` or ``TASK_SCHEDULES``) or when
the claims database remembers it: a claim, a pause, or a deploy that
recorded it (``KnownCommand`` at ``migrate``, ``ScheduleVersion`` from a
scheduler). A job removed from the code stays
known while its rows do, so that an operator can still pause, retire or
look at it. Any other name is a typo, refused with ``UnknownJob`` naming
the jobs that exist, before anything is written.

The scheduler, health and the admin read each job's schedules here too, so
that they agree on what each job's schedules are.

One job, one name: two ``JobCommand``s that claim under one name (the same
``job_name``, or one's ``job_name`` the other's command name) would be one
job to their claims, each skipping the other's runs as its own. Nothing
can tell their claims apart afterwards, so they are refused before any:
check jobclaims.E010 names them, a run of either refuses to start, and
the scheduler leaves both out (``shared_names()``).
"""

from __future__ import annotations

import sys
from typing import Any

from django.apps import apps as global_apps
from django.apps.registry import Apps
from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand
from django.db import router

from jobclaims.claims import naming
from jobclaims.conf import jobclaims_settings
from jobclaims.exceptions import UnknownJob
from jobclaims.jobs import stored_schedules, task_schedules
from jobclaims.jobs.commands import TAG_PATTERN, JobCommand
from jobclaims.jobs.schedules import JobSchedule, entries
from jobclaims.models import (
    JobPause,
    JobRun,
    JobTag,
    KnownCommand,
    ScheduleVersion,
    StoredSchedule,
)

#: Set on ``ClaimedTask`` (``jobclaims.contrib.celery``), so that a claimed
#: Celery task is known without this module importing Celery's integration.
CLAIMED_TASK_MARK = "jobclaims_claimed_task"

#: How many names an ``UnknownJob`` message lists.
SHOWN = 20


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


def claim_names(name: str, command: JobCommand) -> set[str]:
    """The names the command ``name`` claims under: its job's, and each of
    its named schedules' (``jobclaims.claims.naming``)."""
    job = command.job_name or name
    return {job} | {
        naming.claim_name(job, each.given_name)
        for each in entries(type(command))
        if each.given_name
    }


def shared_names() -> dict[str, list[str]]:
    """Each name that more than one ``JobCommand`` claims under, with those
    commands' names, in order."""
    by_name: dict[str, list[str]] = {}
    for name, command in job_commands().items():
        for claimed in sorted(claim_names(name, command)):
            by_name.setdefault(claimed, []).append(name)
    return {claimed: names for claimed, names in by_name.items() if len(names) > 1}


#: How to end a shared name: the fix every refusal of one names.
SHARED_NAME_FIX = (
    "give each JobCommand its own job_name (or remove job_name, to claim under the "
    "command's own name)"
)


def shared_name_problem(claimed: str, commands: list[str]) -> str:
    """What is wrong with ``commands`` claiming under one name, ``claimed``."""
    listed = ", ".join(commands[:-1]) + f" and {commands[-1]}"
    each = "both" if len(commands) == 2 else "all"
    return (
        f"the commands {listed} {each} claim their runs as {claimed!r}, so each would "
        "skip the other's runs as its own"
    )


def claimed_tasks() -> set[str]:
    """The names of the Celery tasks based on ``ClaimedTask``, when Celery is in use."""
    if "celery" not in sys.modules:
        return set()
    from celery import current_app

    return {
        name
        for name, task in current_app.tasks.items()
        if getattr(task, CLAIMED_TASK_MARK, False) is True
    }


def command_jobs() -> set[str]:
    """The names this code's ``JobCommand``s claim under, scheduled or not."""
    return set().union(*(claim_names(name, each) for name, each in job_commands().items()))


def task_jobs() -> set[str]:
    """The names this code's task schedules claim under (``jobclaims.scheduled()``,
    ``JOBCLAIMS["TASK_SCHEDULES"]``), and their tasks' own."""
    return task_schedules.claim_names(task_schedules.usable()[0])


def jobs_in_code() -> set[str]:
    """The names every job this code defines claims under: commands, claimed
    tasks and scheduled ones."""
    return command_jobs() | claimed_tasks() | task_jobs()


def recorded_jobs() -> set[str]:
    """The jobs the claims database remembers: claimed, paused, recorded
    by a deploy, or stored schedules' (``stored_jobs()``); not
    ``naming.ALL_JOBS``, which a pause of all jobs records."""
    recorded = JobRun.objects.order_by().values_list("job", flat=True)
    for model in (JobPause, KnownCommand, ScheduleVersion):
        recorded = recorded.union(model.objects.order_by().values_list("job", flat=True))
    return (set(recorded) | stored_jobs()) - {naming.ALL_JOBS}


def stored_jobs() -> set[str]:
    """The names the stored schedules claim under, each that names its
    command or task well enough to tell: each can be paused before its
    first fire."""
    commands = job_commands()
    names = set()
    for command, task, name in StoredSchedule.objects.values_list("command", "task", "name"):
        if not task:
            job = getattr(commands.get(command), "job_name", None) or command
        else:
            try:
                job = task_schedules.job_of(
                    task_schedules.resolve(task_schedules.Declared(task, "stored"))
                )
            except ValueError:
                continue  # Not a task: it claims nothing, nor can it be paused.
        names.add(naming.claim_name(job, name))
    return names


def known_jobs() -> list[str]:
    """Every job that exists, by name: in the code, or remembered."""
    return sorted(jobs_in_code() | recorded_jobs())


def require_known(job: str) -> None:
    """Raise ``UnknownJob``, naming the jobs that exist, unless ``job`` is one."""
    if job in jobs_in_code() or job in recorded_jobs():
        return
    raise UnknownJob(f"no job is named {job!r}; {name_the_known()}")


def name_the_known() -> str:
    """The end of an ``UnknownJob`` message: which names would have done."""
    names = known_jobs()
    if not names:
        return "no job is defined yet"
    shown = ", ".join(names[:SHOWN]) + (", …" if len(names) > SHOWN else "")
    return f"name one of: {shown}"


def scheduled_jobs() -> list[JobSchedule]:
    """Each schedule of every scheduled job: one per schedule of a job with several.

    Raises ``ValueError`` naming the fix for a schedule that cannot be used.
    """
    commands = [
        job
        for name, command in scheduled_commands().items()
        for job in JobSchedule.each_of(command, name)
    ]
    tasks, problems = task_schedules.usable()
    if problems:
        raise ValueError(next(iter(problems.values())))
    return commands + tasks


def schedules_of(command: str) -> list[JobSchedule]:
    """Each schedule of the job whose management command is ``command``, or
    of the scheduled task of that name; ``ValueError`` naming the fix if they
    cannot be used, none for a job without a schedule."""
    found = scheduled_commands().get(command)
    if found is not None:
        return JobSchedule.each_of(found, command)
    return [job for job in task_schedules.usable()[0] if job.command == command]


def usable_jobs() -> tuple[list[JobSchedule], dict[str, str]]:
    """Each schedule of every scheduled job that has usable ones, and by
    command what is wrong with each other job, naming the fix: one job's
    mistake does not keep the others from running."""
    jobs, problems = [], {}
    shared = {
        name: (claimed, commands)
        for claimed, commands in shared_names().items()
        for name in commands
    }
    for name, command in scheduled_commands().items():
        if name in shared:
            problem = shared_name_problem(*shared[name])
            problems[name] = f"{name}: {problem}; {SHARED_NAME_FIX}"
            continue
        try:
            jobs.extend(JobSchedule.each_of(command, name))
        except ValueError as error:
            problems[name] = str(error)
    tasks, task_problems = task_schedules.usable()
    return jobs + tasks, {**problems, **task_problems}


def every_schedule() -> tuple[list[JobSchedule], dict[str, str]]:
    """The code's usable schedules (``usable_jobs()``) and the stored ones
    (``jobclaims.jobs.stored_schedules``), and what keeps each other one
    from running, naming the fix: what the scheduler runs, and what the
    views and health watch."""
    code, problems = usable_jobs()
    stored, stored_problems = stored_schedules.stored_jobs(job_commands(), code)
    return code + stored, {**problems, **stored_problems}


def schedule_of(job: str) -> JobSchedule | None:
    """The schedule of the job whose claims are named ``job``, if it has a usable one."""
    return next((each for each in every_schedule()[0] if each.job == job), None)


def tags_in_code() -> set[tuple[str, str]]:
    """Each tag this code gives a job, as a (job, tag pause) pair: the name
    the job claims under, and ``#tag``. A tag check W007 refuses is left out."""
    return {
        (command.job_name or name, naming.tag_pause(tag))
        for name, command in job_commands().items()
        if not isinstance(command.tags, str)
        for tag in command.tags
        if isinstance(tag, str) and TAG_PATTERN.fullmatch(tag)
    }


def known_tags() -> set[str]:
    """Every tag a pause can name, with its mark: this code's and those recorded."""
    recorded = JobTag.objects.values_list("tag", flat=True)
    return {tag for _job, tag in tags_in_code()} | set(recorded)


def record_tags(tags: type[JobTag] = JobTag, using: str | None = None) -> None:
    """Record this code's tags, so that every claim of a tagged job finds
    them: insert-if-absent, and a tag the code took away from one of its
    jobs is forgotten (a job the code no longer has keeps its rows)."""
    rows = tags.objects.db_manager(using) if using else tags.objects
    given = tags_in_code()
    in_code = command_jobs()
    for job, tag in rows.filter(job__in=in_code).values_list("job", "tag"):
        if (job, tag) not in given:
            rows.filter(job=job, tag=tag).delete()
    rows.bulk_create([tags(job=job, tag=tag) for job, tag in sorted(given)], ignore_conflicts=True)


def record_commands(using: str, apps: Apps = global_apps, **kwargs: Any) -> None:
    """The ``post_migrate`` receiver: record this code's commands, so that
    one later removed from the code is known to be gone, not late, and
    their tags (``record_tags()``), so that a pause of a tag holds for them.

    A job's claims do not say how it was run, and only the code can list
    its jobs, so health takes a job for gone when some deploy's code had it
    (a ``KnownCommand`` row, or a schedule a scheduler recorded) and this
    code does not. Deploys run ``migrate``, as Django's content types rely
    on: each records its commands, insert-if-absent, in the claims database, if
    ``using`` is it and its table is migrated. ``flush`` sends the signal
    too, without the migrations' ``apps``: the tables are all there then.
    """
    try:
        # The models as the migrations left them: absent when migrated back
        # before their tables, as content types do it.
        model = apps.get_model("jobclaims", "KnownCommand")
        tags = apps.get_model("jobclaims", "JobTag")
    except LookupError:
        return
    if using != jobclaims_settings.claims_database(KnownCommand):
        return
    if not router.allow_migrate_model(using, model):
        return
    model.objects.using(using).bulk_create(
        [model(job=job) for job in sorted(command_jobs())], ignore_conflicts=True
    )
    record_tags(tags, using)
