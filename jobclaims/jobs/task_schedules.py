"""Schedules whose target is a task: a Celery task or a Django task, enqueued once per fire.

Declared in code, found by every host's scheduler, in two ways:

- ``@jobclaims.scheduled("0 3 * * *", ...)`` above the task decorator
  (``@task`` over ``@claimed``, or ``@shared_task(base=ClaimedTask)``); it
  returns the task unchanged and records its schedule as the module that
  defines it is imported. Each installed app's ``tasks`` module is imported
  to find them (``import_tasks_modules()``), as Celery's autodiscovery does;
- ``JOBCLAIMS["TASK_SCHEDULES"]``, for a beat schedule moved over as it was:
  ``{"nightly-report": {"task": "billing.tasks.nightly_report", "schedule":
  "0 3 * * *", "args": [...], "kwargs": {...}}}``.

A task schedule is a ``JobSchedule`` like a command's, with the same
options (misfire, jitter, retries, lease, several schedules with their
arguments) and the same claims, pause, health and admin; its ``task`` is a
``TaskTarget``, so the scheduler enqueues a won fire instead of starting a
process. Its job is the name the task claims under: a Celery task's
registered name, a Django task's ``@claimed`` job (its dotted path by
default); each of several schedules is ``job[name]`` (``claims.naming``).

Where the task's queue is a table in the claims database (django-tasks-db),
the fire's claim and its message commit in one transaction: a scheduler that
dies between them leaves neither, and another host's claim wins the fire.
Elsewhere (Celery's broker) the claim commits first with a short start lease,
then the message is sent, then the lease becomes the queue lease; a host
that dies between the claim and the broker's acknowledgement leaves a claim
whose start lease lapses, and another host takes the fire over and enqueues
it again. A copy of the message that arrives anyway finds its claim's token
gone and steps aside (``jobclaims.running.queued``): the task runs once.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from django.apps import apps
from django.db import DatabaseError, connections, router, transaction
from django.utils import timezone
from django.utils.module_loading import import_string, module_has_submodule

from jobclaims.claims import retries
from jobclaims.claims.rule import Refusal
from jobclaims.conf import jobclaims_settings
from jobclaims.jobs.schedules import JobSchedule, Misfire, Schedule, problems
from jobclaims.models import JobRun
from jobclaims.running import attempts
from jobclaims.running.queued import (
    FIRE_HEADER,
    FIRE_KWARG,
    TOKEN_HEADER,
    WINDOW_HEADER,
    QueuedFire,
)
from jobclaims.time.windows import WindowSpec

#: Set by ``@claimed`` on its wrapper: the job a Django task claims under,
#: its lease and whether it allows overlap, which its schedules take up.
CLAIMED_OPTIONS = "jobclaims_claim"


@dataclass(frozen=True)
class Declared:
    """A task's schedules as ``@scheduled`` or ``TASK_SCHEDULES`` declared them."""

    #: The task object (or Celery's proxy of it), or its dotted path.
    task: Any
    #: Where it was declared, for the messages: "@scheduled" or the setting's key.
    source: str
    schedule: str | None = None
    schedules: Sequence[Schedule] = ()
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)


#: The tasks ``@scheduled`` declared, in the order their modules were imported.
_declared: list[Declared] = []


def scheduled(
    *schedules: str | Schedule,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    time_zone: str | None = None,
    jitter: datetime.timedelta | None = None,
    misfire: str = Misfire.LATEST,
    misfire_deadline: datetime.timedelta | None = None,
    retries: int = 0,
    retry_backoff: datetime.timedelta = datetime.timedelta(seconds=10),
    retry_backoff_max: datetime.timedelta = datetime.timedelta(minutes=10),
    lease: datetime.timedelta | None = None,
) -> Callable[[Any], Any]:
    """Schedule a task: every host's ``jobclaims_scheduler`` enqueues it once per fire.

    Put it above the task decorator, which it returns unchanged::

        @scheduled("0 3 * * *")
        @task
        @claimed()
        def nightly_report(): ...

        @scheduled(Schedule("0 * * * *", kwargs={"region": "eu"}), retries=2)
        @shared_task(base=ClaimedTask)
        def sync_prices(region): ...

    One cron expression (with ``args`` and ``kwargs`` for the task), or
    several ``Schedule`` objects, each with its own arguments and name.
    The other options are a ``JobCommand``'s; what is wrong with them is
    reported by check jobclaims.W005 and by the scheduler, naming the fix.
    """
    options = {
        "time_zone": time_zone,
        "jitter": jitter,
        "misfire": misfire,
        "misfire_deadline": misfire_deadline,
        "retries": retries,
        "retry_backoff": retry_backoff,
        "retry_backoff_max": retry_backoff_max,
        "lease": lease,
    }

    def declare(task: Any) -> Any:
        one = len(schedules) == 1 and not isinstance(schedules[0], Schedule)
        _declared.append(
            Declared(
                task=task,
                source="@scheduled",
                schedule=str(schedules[0]) if one else None,
                # A cron string among several is a Schedule of its own, unnamed:
                # problems() then names what is wrong with the list.
                schedules=()
                if one
                else tuple(
                    each if isinstance(each, Schedule) else Schedule(each) for each in schedules
                ),
                args=tuple(args),
                kwargs=dict(kwargs or {}),
                options=options,
            )
        )
        return task

    return declare


def from_settings() -> list[Declared]:
    """The task schedules ``JOBCLAIMS["TASK_SCHEDULES"]`` declares, by task:
    one entry is the task's one schedule; several for one task are its
    ``schedules``, each named by its key."""
    by_task: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for name, entry in jobclaims_settings.task_schedules.items():
        by_task.setdefault(str(entry["task"]), []).append((name, entry))
    found = []
    for path, entries in by_task.items():
        options = {
            key: value
            for _, entry in entries
            for key, value in entry.items()
            if key not in ("task", "schedule", "args", "kwargs")
        }
        source = ", ".join(f"TASK_SCHEDULES[{name!r}]" for name, _ in entries)
        if len(entries) == 1:
            ((_, entry),) = entries
            found.append(
                Declared(
                    path,
                    source,
                    schedule=cast(str, entry["schedule"]),
                    args=tuple(cast(Sequence[Any], entry.get("args", ()))),
                    kwargs=dict(cast(Mapping[str, Any], entry.get("kwargs", {}))),
                    options=options,
                )
            )
        else:
            listed = [
                Schedule(
                    entry["schedule"],
                    args=entry.get("args", ()),
                    kwargs=dict(entry.get("kwargs", {})),
                    name=name,
                )
                for name, entry in entries
            ]
            found.append(Declared(path, source, schedules=listed, options=options))
    return found


def import_tasks_modules() -> list[tuple[str, Exception]]:
    """Import each installed app's ``tasks`` module, as a Celery worker does,
    so that every ``@scheduled`` task is declared; return the modules refused
    by an option they give (a ``ValueError`` or ``TypeError`` naming it),
    each with its error, for check jobclaims.E008 to name."""
    refused: list[tuple[str, Exception]] = []
    for config in apps.get_app_configs():
        if module_has_submodule(config.module, "tasks"):
            module = f"{config.name}.tasks"
            try:
                importlib.import_module(module)
            except ImportError:
                # What this process lacks (a Django 6 task on Django 5.2, a
                # worker's extra) is the worker's to report as it starts.
                continue
            except (ValueError, TypeError) as error:
                refused.append((module, error))
    return refused


def declared() -> list[Declared]:
    """Every task schedule the code and the settings declare."""
    import_tasks_modules()
    return [*_declared, *from_settings()]


def resolve(declared: Declared) -> Any:
    """The task object a declaration names; ``ValueError`` naming the fix."""
    task = declared.task
    if isinstance(task, str):
        try:
            task = import_string(task)
        except ImportError as error:
            raise ValueError(
                f"{declared.source}: cannot import the task {declared.task!r} ({error}); "
                "name it by its dotted path, module and function: 'billing.tasks.nightly_report'"
            ) from error
    if not (_is_celery(task) or _is_django(task)):
        raise ValueError(
            f"{declared.source}: {task!r} is not a Celery task or a Django task; "
            "put @scheduled above @task or @shared_task, or name such a task"
        )
    return task


def target_problem(task: Any) -> str:
    """Why a task cannot take its fires' claims over, naming the fix; "" if it can.

    Its worker must adopt the claim the message carries, or two copies of
    one message would both run: a Celery task does as a ``ClaimedTask``, a
    Django task through the ``@claimed`` function under its ``@task``.
    """
    if _is_celery(task):
        if getattr(task, "jobclaims_claimed_task", False) is True:
            return ""
        return (
            f"the scheduled Celery task {task.name!r} is not a ClaimedTask, so its worker "
            "cannot take its fire's claim over and two copies of one message would both "
            "run; make it @shared_task(base=jobclaims.contrib.celery.ClaimedTask)"
        )
    if hasattr(task.func, CLAIMED_OPTIONS):
        return ""
    return (
        f"the scheduled Django task {task.module_path!r} does not run a @claimed "
        "function, so its worker cannot take its fire's claim over and two copies of "
        "one message would both run; put @claimed() under @task"
    )


def job_of(task: Any) -> str:
    """The name a task claims under: Celery's registered name, or a Django
    task's ``@claimed`` job (its dotted path by default)."""
    if _is_celery(task):
        return str(task.name)
    return str(_claim_options(task).get("job") or task.module_path)


def _claim_options(task: Any) -> dict[str, Any]:
    """How the task claims its windows: its lease and whether it allows overlap."""
    if _is_celery(task):
        return {"lease": task.claim_lease, "allow_overlap": task.claim_allow_overlap}
    return dict(getattr(task.func, CLAIMED_OPTIONS, None) or {})


def _is_celery(task: Any) -> bool:
    # A duck's test: the scheduler must not import Celery for a Django task.
    return type(task).__module__ == "celery.local" or callable(getattr(task, "apply_async", None))


def _is_django(task: Any) -> bool:
    return callable(getattr(task, "enqueue", None)) and hasattr(task, "func")


class _TaskOptions:
    """A task's schedule options, in the shape ``jobs.schedules`` reads a
    ``JobCommand``'s, so that they are checked and built alike."""

    job_name: str | None = None
    problem_label: str = ""
    window: WindowSpec = "minutely"
    allow_overlap = False
    overlap: str | None = None
    schedule: str | None = None
    schedules: Sequence[Schedule] = ()
    time_zone: str | None = None
    jitter: datetime.timedelta | None = None
    misfire: str = Misfire.LATEST
    misfire_deadline: datetime.timedelta | None = None
    retries = 0
    retry_backoff = datetime.timedelta(seconds=10)
    retry_backoff_max = datetime.timedelta(minutes=10)
    lease: datetime.timedelta | None = None
    timeout: datetime.timedelta | None = None
    timeout_grace = datetime.timedelta(seconds=10)
    max_run_time: datetime.timedelta | None = None
    #: A task's fire starts no process: its worker runs it.
    fresh_interpreter = False
    #: A task's arguments are any values, not a command's strings.
    takes_any_arguments = True

    @classmethod
    def declares_window(cls) -> bool:
        return False  # Each fire is its own window, keyed by its time.

    def lease_for(self, given: datetime.timedelta | None) -> datetime.timedelta:
        return given or self.lease or jobclaims_settings.default_lease


def _options(task: Any, job: str, declared: Declared) -> type[_TaskOptions]:
    claims = _claim_options(task)
    attributes: dict[str, Any] = {
        "lease": claims.get("lease"),
        "allow_overlap": bool(claims.get("allow_overlap", False)),
        **{key: value for key, value in declared.options.items() if value is not None},
    }
    return type(
        "TaskScheduleOptions",
        (_TaskOptions,),
        {
            **attributes,
            "job_name": job,
            "problem_label": f"{job} ({declared.source})",
            "schedule": declared.schedule,
            "schedules": list(declared.schedules),
        },
    )


def build(declared: Declared) -> list[JobSchedule]:
    """The task's schedules as the scheduler runs them; ``ValueError``
    naming the fix when they cannot be used."""
    task = resolve(declared)
    if problem := target_problem(task):
        raise ValueError(f"{declared.source}: {problem}")
    job = job_of(task)
    options = _options(task, job, declared)
    if found := problems(options):
        raise ValueError(found[0])
    built = JobSchedule.each_of(options(), job)
    if declared.schedule is not None:
        targets = [TaskTarget(task, tuple(declared.args), dict(declared.kwargs))]
    else:
        targets = [
            TaskTarget(task, tuple(each.args), dict(each.kwargs)) for each in declared.schedules
        ]
    return [
        dataclasses.replace(each, task=target) for each, target in zip(built, targets, strict=True)
    ]


def usable() -> tuple[list[JobSchedule], dict[str, str]]:
    """Every usable task schedule, and by task what is wrong with each other
    one, naming the fix: one task's mistake keeps no other from running."""
    jobs: list[JobSchedule] = []
    found: dict[str, str] = {}
    for each in declared():
        try:
            jobs.extend(build(each))
        except ValueError as error:
            found[str(getattr(each.task, "__name__", None) or each.task)] = str(error)
    claimed: dict[str, int] = {}
    for job in jobs:
        claimed[job.job] = claimed.get(job.job, 0) + 1
    for name in sorted(name for name, count in claimed.items() if count > 1):
        found[name] = (
            f"{name} is scheduled twice (by @scheduled and TASK_SCHEDULES, or by two "
            "entries of one name), so both would share its claims; declare its "
            "schedules in one place, as a list"
        )
    return [job for job in jobs if claimed[job.job] == 1], found


def claim_names(declared_jobs: list[JobSchedule]) -> set[str]:
    """The names task schedules claim under, and their tasks' own."""
    return {job.job for job in declared_jobs} | {job.command for job in declared_jobs}


@dataclass(frozen=True)
class TaskTarget:
    """Where a task schedule's won fire goes: the task's queue, with its arguments."""

    task: Any
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_celery(self) -> bool:
        return _is_celery(self.task)

    def fire(
        self,
        job: JobSchedule,
        claim: Callable[[datetime.timedelta], JobRun | Refusal],
        *,
        start_lease: datetime.timedelta,
        jittered: bool,
    ) -> JobRun | Refusal:
        """Claim the fire with ``claim(lease)`` and enqueue the task where it won.

        Returns the refusal, or the run: ``running`` once its message is
        enqueued, or settled by the schedule's retry policy when it could
        not be (the error says why). The jitter, when the fire has one, is
        the message's delay in its queue: the scheduler holds nothing.
        """
        delay = self.delay(job, jittered)
        lease = self.claim_lease(start_lease, delay)
        if self.in_claims_database():
            db = jobclaims_settings.claims_database(JobRun)

            def claim_and_enqueue() -> JobRun | Refusal:
                with transaction.atomic(using=db):
                    run = claim(lease)
                    if not isinstance(run, Refusal):
                        self.enqueue_or_settle(job, run, delay)
                    return run

            # One transaction: a retryable error rolled both back, so both go again.
            return retries.retrying(connections[db], claim_and_enqueue)
        run = claim(lease)
        if not isinstance(run, Refusal):
            send_messages([(job, run, delay)])
        return run

    @staticmethod
    def delay(job: JobSchedule, jittered: bool) -> float:
        """The fire's delay in its queue, in seconds: its jitter, if it has one."""
        return random.uniform(0, job.jitter.total_seconds()) if jittered and job.jitter else 0.0

    def claim_lease(self, start_lease: datetime.timedelta, delay: float) -> datetime.timedelta:
        """The lease a fire is claimed with: the queue's lease where its
        message commits with the claim, else ``start_lease`` until the
        message is sent (``send()``); either lengthened by the delay."""
        base = jobclaims_settings.queue_lease if self.in_claims_database() else start_lease
        return base + datetime.timedelta(seconds=delay)

    def enqueue_or_settle(self, job: JobSchedule, run: JobRun, delay: float) -> bool:
        """Send the fire's message, or settle the fire failed by its retry policy."""
        try:
            self.enqueue(job, run, delay)
        except DatabaseError:
            raise  # The claims database's: the scheduler tries again, as for a claim.
        except Exception as error:  # The queue's own errors, whatever its kind.
            why = f"Could not enqueue the task: {type(error).__name__}: {error}"
            attempts.after_failure(run, job.retry, why)
            run.error = why
            return False
        return True

    def enqueue(self, job: JobSchedule, run: JobRun, delay: float = 0.0) -> None:
        """Send one message for ``run``'s fire, carrying its claim to adopt."""
        fire = QueuedFire(job.job, run.window, str(run.token), job.lease, job.retry)
        if self.is_celery:
            self.task.apply_async(
                self.args,
                dict(self.kwargs),
                headers={
                    WINDOW_HEADER: run.window,
                    TOKEN_HEADER: str(run.token),
                    FIRE_HEADER: fire.header(),
                },
                countdown=delay or None,
            )
            return
        task = self.task
        if delay:
            task = task.using(run_after=timezone.now() + datetime.timedelta(seconds=delay))
        task.enqueue(*self.args, **self.kwargs, **{FIRE_KWARG: fire.to_json()})

    def in_claims_database(self) -> bool:
        """Whether the task's queue is a table of the claims database
        (django-tasks-db's), so that one transaction can hold both."""
        db = jobclaims_settings.claims_database(JobRun)
        if self.is_celery:
            return False
        backend = self.task.get_backend()
        if not type(backend).__module__.startswith("django_tasks_db"):
            return False
        # Its app's label is not its name: ask for the app by its module.
        config = next(
            (each for each in apps.get_app_configs() if each.name == "django_tasks_db"), None
        )
        if config is None:
            return False
        return bool(router.db_for_write(config.get_model("DBTaskResult")) == db)


def send_messages(fires: Sequence[tuple[JobSchedule, JobRun, float]]) -> None:
    """Send the messages of task fires claimed outside their queue's
    database, each ``(job, run, delay)``, then lengthen the claims of those
    sent to the queue's lease, plus their delay, all together: until sent,
    a claim holds only a start's lease, so a host that dies before sending
    frees the fire soon. A claim lost meanwhile is not revived, and its
    message's copy steps aside."""
    sent: dict[float, list[JobRun]] = {}
    for job, run, delay in fires:
        assert job.task is not None, "only tasks' fires are sent"
        if job.task.enqueue_or_settle(job, run, delay):
            sent.setdefault(delay, []).append(run)
    for delay, runs in sent.items():
        JobRun.objects.renew_all(
            runs, jobclaims_settings.queue_lease + datetime.timedelta(seconds=delay)
        )
