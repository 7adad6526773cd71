"""System checks: the project settings under which claims would not hold.

``manage.py check`` (and ``migrate``, ``runserver``, the test runner) runs
them, so a deployment that would let a job run twice is told so before the
first job runs. Every check can be run alone with ``check --tag jobclaims``.

The checks that ask the database server something (W002, W003, W004) are tagged
``database`` and, like Django's own, run only for the databases the checker
names: ``check --database default``, ``migrate`` and the test runner do.

Each message sends the user to the documentation, built from docs/
(``make docs``) and published at ``DOCS_URL``. A page's address is its
markdown file's path with ``.html`` for ``.md``; a heading's anchor is its
text in lower case, each run of other characters made one "-"
(``jobclaims.E002: claims would go to a replica`` is
``jobclaims-e002-claims-would-go-to-a-replica``). Messages name pages
through ``page()`` only, with literal arguments, so
tests/package/test_documentation.py can hold every address the code gives to a
page and heading that exist: a wheel ships no docs/ folder to point to.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.util import find_spec
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import NotSupportedError, connections, router
from django.utils import timezone

from jobclaims import conf
from jobclaims.claims import charsets, standby
from jobclaims.claims.statements import statements_class
from jobclaims.conf import jobclaims_settings
from jobclaims.jobs import discovery, task_schedules
from jobclaims.jobs.claiming import CELERY_BODY_FIX, CELERY_BODY_PROBLEM
from jobclaims.jobs.commands import checking_a_job_run, job_checked, tag_problems
from jobclaims.jobs.commands import problems as command_problems
from jobclaims.jobs.schedules import problems
from jobclaims.models import JobRun, JobSkip
from jobclaims.time import clock, leases

TAG = "jobclaims"

#: The documentation site's root, for the release users run.
DOCS_URL = "https://jobclaims.readthedocs.io/en/stable/"


def page(path: str, anchor: str = "") -> str:
    """The address of the page built from ``docs/<path>.md``, at ``anchor``."""
    address = f"{DOCS_URL}{path}.html"
    return f"{address}#{anchor}" if anchor else address


def register_checks() -> None:
    """Called from ``AppConfig.ready()``, once the models can be imported."""
    register(TAG)(check_settings)
    register(TAG)(check_use_tz)
    register(TAG)(check_time_zone_is_set)
    register(TAG)(check_claims_database_is_the_primary)
    register(TAG)(check_claims_tables_can_be_migrated)
    register(TAG, deploy=True)(check_row_locks)
    register(TAG)(check_claims_database_backend)
    register(TAG)(check_schedules)
    register(TAG)(check_job_names)
    register(TAG)(check_job_commands)
    register(TAG)(check_celery_task_bodies)
    register(TAG)(check_scheduled_tasks)
    register(TAG)(check_beat_and_jobclaims)
    register(TAG, Tags.database)(check_time_zone_tables)
    register(TAG, Tags.database)(check_column_charsets)
    register(TAG, Tags.database)(check_leases_cover_standby_waits)


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.E003: every value in ``JOBCLAIMS`` must be usable."""
    if not _concerns_jobclaims(app_configs):
        return []
    return [
        Error(
            problem,
            hint=f"Fix JOBCLAIMS in your settings; {page('settings')} lists every key.",
            id="jobclaims.E003",
        )
        for problem in conf.problems()
    ]


def check_use_tz(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.E001: claims compare the database's UTC clock with stored moments."""
    if not _concerns_jobclaims(app_configs) or settings.USE_TZ:
        return []
    return [
        Error(
            "USE_TZ is False: jobclaims stores and compares claim times in UTC "
            "by the database's clock, which needs timezone-aware datetimes.",
            hint=f"Set USE_TZ = True (Django's default). {_see('jobclaims-e001-use-tz-is-off')}",
            id="jobclaims.E001",
        )
    ]


def check_time_zone_is_set(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.W008: windows and schedules follow ``TIME_ZONE``, which should be chosen.

    A project that never set it runs every daily window and cron schedule in
    Django's default, America/Chicago, without a word. Not told in a job's
    run, as W001: cron would mail it on every run.
    """
    if (
        not _concerns_jobclaims(app_configs)
        # LazySettings.is_overridden(), which django-stubs leaves out.
        or settings.is_overridden("TIME_ZONE")  # type: ignore[misc]
        or checking_a_job_run.get()
    ):
        return []
    return [
        Warning(
            f"TIME_ZONE is not set, so every window and schedule of your jobs follows "
            f"Django's default, {settings.TIME_ZONE}: a daily job's day starts at its "
            "midnight, and '5 2 * * *' fires at 02:05 there.",
            hint=(
                "Set TIME_ZONE in your settings to the zone your jobs' days and schedules "
                f'follow, like TIME_ZONE = "UTC" or TIME_ZONE = "{settings.TIME_ZONE}". '
                + _see("jobclaims-w008-time-zone-is-not-set")
            ),
            id="jobclaims.W008",
        )
    ]


def check_claims_database_is_the_primary(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.E002: a claim written to or read from a replica is no claim.

    A replica lags its primary, so two instances that each read the replica
    can both see a window as free; and a read-only one refuses the write.

    Only where claims go matters. ``JOBCLAIMS["DATABASE"]`` wins over the
    router, and jobclaims reads claims back from the alias it writes them to
    (jobs, the admin, the operator commands), so a router that sends other
    writes of ``JobRun`` elsewhere is no error.
    """
    if not _concerns_jobclaims(app_configs) or conf.problems():
        return []
    alias = jobclaims_settings.claims_database(JobRun)
    mirrored = connections[alias].settings_dict.get("TEST", {}).get("MIRROR")
    if not mirrored:
        return []
    return [
        Error(
            f"Claims are written to the {alias!r} database, which is a replica "
            f"of {mirrored!r} (its TEST['MIRROR']); a replica's lag would let "
            "two instances claim the same window.",
            hint=(
                f"Route writes of the 'jobclaims' app to the primary, {mirrored!r}, "
                f"or set JOBCLAIMS['DATABASE'] = {mirrored!r}. "
                + _see("jobclaims-e002-claims-would-go-to-a-replica")
            ),
            id="jobclaims.E002",
        )
    ]


def check_claims_tables_can_be_migrated(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.E006: ``migrate`` must be allowed to create the claims tables
    where claims are written.

    A router whose ``allow_migrate()`` refuses the 'jobclaims' app on the
    claims database makes ``migrate jobclaims --database ALIAS`` do nothing
    there, without a word, and every job then fails on a missing table.
    """
    if not _concerns_jobclaims(app_configs) or conf.problems():
        return []
    alias = jobclaims_settings.claims_database(JobRun)
    if router.allow_migrate_model(alias, JobRun):
        return []
    return [
        Error(
            f"Claims are written to the {alias!r} database, but the database "
            f"router's allow_migrate() refuses the 'jobclaims' app there, so "
            f"'manage.py migrate jobclaims --database {alias}' would not create "
            "the claims tables.",
            hint=(
                f"Make your router's allow_migrate() return True for app_label "
                f"'jobclaims' on {alias!r}, or set JOBCLAIMS['DATABASE'] to a "
                "database it migrates. "
                + _see("jobclaims-e006-migrate-would-not-create-the-claims-tables")
            ),
            id="jobclaims.E006",
        )
    ]


def check_row_locks(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.W001: without row locks, claims are exact on one host only.

    A database that cannot lock rows (SQLite) serialises writers with a
    lock on its file, which holds between processes of one host but not
    over a network file system.

    A deployment check (``manage.py check --deploy``), as Django's own
    warnings about production settings are: SQLite on one host is a setup
    jobclaims supports, and a warning printed by every command of a fresh
    project, jobs' runs from cron included, says nothing the first did not.
    """
    if not _concerns_jobclaims(app_configs) or conf.problems():
        return []
    alias = jobclaims_settings.claims_database(JobRun)
    connection = connections[alias]
    if connection.features.has_select_for_update:
        return []
    return [
        Warning(
            f"The {alias!r} database, which claims are written to, cannot lock "
            "rows: claims keep a job to one run only among processes on one host.",
            hint=f"{_file_lock_hint(alias)} "
            + _see("jobclaims-w001-the-database-cannot-lock-rows"),
            id="jobclaims.W001",
        )
    ]


def check_claims_database_backend(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.E004: claims are written in PostgreSQL, MariaDB/MySQL or SQLite SQL."""
    if not _concerns_jobclaims(app_configs) or conf.problems():
        return []
    alias = jobclaims_settings.claims_database(JobRun)
    try:
        statements_class(connections[alias].vendor)
    except NotSupportedError as unsupported:
        return [
            Error(
                f"Claims are written to the {alias!r} database, and {unsupported}",
                hint="Keep claims in PostgreSQL, MariaDB/MySQL or SQLite, and set "
                "JOBCLAIMS['DATABASE'] to its alias. "
                + _see("jobclaims-e004-a-database-jobclaims-has-no-sql-for"),
                id="jobclaims.E004",
            )
        ]
    return []


def check_schedules(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.W005: a job's schedule must be a cron expression its window agrees with.

    The scheduler leaves such a job out and names it, the job refuses to run,
    and ``jobclaims_status --check`` reports it critical; this says so at
    deploy time too. A warning, not an error: one job's broken schedule must
    not stop ``migrate``, or every other job, from running.
    """
    if not _concerns_jobclaims(app_configs):
        return []
    found: list[CheckMessage] = [
        Warning(
            problem,
            hint="Fix the job's schedule, window or misfire attributes. "
            + _see("jobclaims-w005-a-schedule-that-cannot-work"),
            id="jobclaims.W005",
        )
        for command in discovery.scheduled_commands().values()
        for problem in problems(type(command))
    ]
    return found + [
        Warning(
            problem,
            hint="Fix the task's schedule options. "
            + _see("jobclaims-w005-a-schedule-that-cannot-work"),
            id="jobclaims.W005",
        )
        for problem in _task_schedule_problems()[1]
    ]


def _task_schedule_problems() -> tuple[list[str], list[str]]:
    """What keeps each task schedule from being used: why its task cannot take
    its fires over (E009), and anything else (W005)."""
    targets, others = [], []
    for declared in task_schedules.declared():
        try:
            task = task_schedules.resolve(declared)
        except ValueError as error:
            others.append(str(error))
            continue
        if problem := task_schedules.target_problem(task):
            targets.append(f"{declared.source}: {problem}")
            continue
        try:
            task_schedules.build(declared)
        except ValueError as error:
            others.append(str(error))
    others += [
        problem for problem in task_schedules.usable()[1].values() if "scheduled twice" in problem
    ]
    return targets, others


def check_scheduled_tasks(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.E009: a scheduled task must take its fire's claim over.

    The scheduler enqueues each fire once, with its claim; the worker adopts
    that claim, so a second copy of the message steps aside. A task that
    cannot adopt it would run every copy: the scheduler leaves it out.
    """
    if not _concerns_jobclaims(app_configs):
        return []
    return [
        Error(
            problem,
            hint="Make the task claimed as the hint of the message says. "
            + _see("jobclaims-e009-a-scheduled-task-that-cannot-take-its-fire-over"),
            id="jobclaims.E009",
        )
        for problem in _task_schedule_problems()[0]
    ]


def check_beat_and_jobclaims(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.W006: a task scheduled both by Celery beat and by jobclaims.

    Each would enqueue it: a beat's copies are refused by the task's claim
    only when they fall in a fire's window, and the beat runs on one host,
    which is what moving to jobclaims was to end.
    """
    if not _concerns_jobclaims(app_configs):
        return []
    beat = dict(getattr(settings, "CELERY_BEAT_SCHEDULE", None) or {})
    if "celery" in sys.modules:
        from celery import current_app

        beat.update(current_app.conf.beat_schedule or {})
    if not beat:
        return []
    scheduled = {job.command for job in task_schedules.usable()[0]}
    return [
        Warning(
            f"The task {entry['task']!r} is scheduled by Celery beat ({name!r}) and by "
            "jobclaims: both enqueue it.",
            hint="Remove its beat entry once jobclaims_scheduler runs. "
            + _see("jobclaims-w006-a-task-scheduled-by-beat-and-by-jobclaims"),
            id="jobclaims.W006",
        )
        for name, entry in sorted(beat.items())
        if isinstance(entry, dict) and entry.get("task") in scheduled
    ]


def check_job_names(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.E010: one job, one name; two ``JobCommand``s must not claim
    under one (``jobclaims.jobs.discovery.shared_names()``).

    An error: their claims would be one job's, each skipping the other's
    runs, and nothing could tell them apart afterwards. A run of a job is
    told only of the names it shares itself, so that it refuses to start
    and the other jobs run; the scheduler leaves the jobs out and names
    them itself (``usable_jobs()``), so its own checks leave this out.
    """
    if not _concerns_jobclaims(app_configs):
        return []
    shared = discovery.shared_names()
    if checking_a_job_run.get():
        running = job_checked.get()
        shared = {name: commands for name, commands in shared.items() if running in commands}
    fix = discovery.SHARED_NAME_FIX
    return [
        Error(
            _sentence(discovery.shared_name_problem(claimed, commands)),
            hint=f"{_sentence(fix)} {_see('jobclaims-e010-two-jobs-claim-under-one-name')}",
            id="jobclaims.E010",
        )
        for claimed, commands in shared.items()
    ]


def check_job_commands(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.W007: a job your own scheduler starts must be able to run,
    and any job's tags must be ones a pause can name.

    A ``JobCommand`` started by cron with ``window = "daliy"`` would fail at
    its first run, in a mail; this says so at deploy time, with the message
    the run would give. A scheduled job's are W005's. Not in a job's run:
    that run refuses with the same message itself.
    """
    if not _concerns_jobclaims(app_configs) or checking_a_job_run.get():
        return []
    return [
        Warning(
            problem,
            hint="Fix the job's attributes: until then each of its runs fails with this "
            "error. " + _see("jobclaims-w007-a-job-that-cannot-run"),
            id="jobclaims.W007",
        )
        for name, command in discovery.job_commands().items()
        for problem in [
            *(command_problems(name, type(command)) if _unscheduled(command) else []),
            *tag_problems(name, command.tags),
        ]
    ]


def _unscheduled(command: Any) -> bool:
    """Whether ``command`` is started by your own scheduler: its problems are W007's."""
    return command.schedule is None and not command.schedules


def check_celery_task_bodies(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobclaims.E007: ``@claimed`` must not be the body of a Celery task.

    Under ``@shared_task`` its refusals would look like successes, and a
    worker or beat with such a task refuses to start; this says so at
    deploy time. It reads the tasks modules Celery's ``autodiscover_tasks()``
    would, and any other module imported by then.

    Not in a job's run, as W001: importing every tasks module, and Celery,
    would slow the start of every job for what ``manage.py check`` tells.
    """
    if not _concerns_jobclaims(app_configs) or checking_a_job_run.get():
        return []
    if find_spec("celery") is None:
        return []
    unbuilt: list[CheckMessage] = [
        _unbuilt_task(f"The tasks module {module!r} cannot be imported", error)
        for module, error in task_schedules.import_tasks_modules()
    ]
    if "celery" not in sys.modules:
        return unbuilt  # No module imported Celery, so there is no Celery task.
    from jobclaims.contrib.celery import misordered_shared_tasks

    try:
        misordered = misordered_shared_tasks()
    except (ValueError, TypeError) as error:
        return [*unbuilt, _unbuilt_task("A Celery task cannot be built", error)]
    return unbuilt + [
        Error(
            f"The Celery task {name!r} has @claimed under its task decorator. "
            + CELERY_BODY_PROBLEM,
            hint=f"{CELERY_BODY_FIX}. "
            + _see("jobclaims-e007-claimed-under-a-celery-task-decorator"),
            id="jobclaims.E007",
        )
        for name in misordered
    ]


def _unbuilt_task(what: str, error: Exception) -> Error:
    """jobclaims.E008: a claimed task's option, or ``@claimed``'s, is refused."""
    return Error(
        f"{what}: {error}",
        hint=(
            "Correct the option the message names, in the task's decorator or in "
            "task_annotations; a worker would refuse the task the same way as it starts. "
            + _see("jobclaims-e008-a-claimed-task-s-option-is-refused")
        ),
        id="jobclaims.E008",
    )


def check_time_zone_tables(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """jobclaims.W002: the admin's dates need the server's time-zone tables.

    The claims list groups claims by date in the zone active for the
    request: ``TIME_ZONE``, unless a middleware activates the operator's.
    Where that is not the connection's zone, Django converts each moment
    with the server's time-zone tables (MariaDB/MySQL's ``CONVERT_TZ``), and
    without them the list cannot group its claims by date (Django would fail
    with "Database returned an invalid datetime value"; the list leaves the
    dates out). Django's own feature flag says whether the tables are there. A
    zone a middleware activates cannot be known here, so the check judges
    ``TIME_ZONE``; the list leaves its dates out for an operator in a zone
    the server cannot convert to (``JobRunAdmin.get_changelist_instance``).
    """
    alias = _claims_database_in(app_configs, databases)
    if alias is None or not settings.USE_TZ:
        return []
    connection = connections[alias]
    zone = timezone.get_default_timezone_name()
    if clock.dates_in(connection, zone):
        return []
    return [
        Warning(
            f"The {alias!r} database has no time-zone tables, and TIME_ZONE is {zone!r}: "
            "the admin's list of claims, which groups them by date in TIME_ZONE, lists them "
            "ungrouped without them (Django converts times there with the server's tables).",
            hint=(
                "Load the tables into the server: mariadb-tzinfo-to-sql /usr/share/zoneinfo "
                "| mariadb -u root mysql (on MySQL, mysql_tzinfo_to_sql and mysql); "
                "or set TIME_ZONE = 'UTC'. "
                + _see("jobclaims-w002-no-time-zone-tables-for-the-admin-s-dates")
            ),
            id="jobclaims.W002",
        )
    ]


def check_column_charsets(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """jobclaims.W003: columns that lose 4-byte characters cannot keep every name apart.

    Claims with such a name are refused (``JobRun.validate_claim()``); this
    says so before the first one is, naming the tables to convert.
    """
    alias = _claims_database_in(app_configs, databases)
    if alias is None:
        return []
    tables = [JobRun._meta.db_table, JobSkip._meta.db_table]
    lossy = sorted(charsets.lossy_columns(connections[alias], tables).items())
    if not lossy:
        return []
    columns = "; ".join(f"{table}.{column} {why}" for (table, column), why in lossy)
    conversions = "; ".join(
        f"ALTER TABLE {table} {charsets.CONVERSION}"
        for table in sorted({table for (table, _), _ in lossy})
    )
    return [
        Warning(
            f"In the {alias!r} database, some claims columns lose characters of 4 bytes "
            f"(emoji, and others beyond the Basic Multilingual Plane): {columns}. A claim "
            "whose job or window has one is refused.",
            hint=f"Convert the tables: {conversions}. "
            + _see("jobclaims-w003-columns-that-lose-characters-of-4-bytes"),
            id="jobclaims.W003",
        )
    ]


def check_leases_cover_standby_waits(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """jobclaims.W004: a lease must outlast a commit's wait for a synchronous standby.

    A claim's commit may wait up to ``STANDBY_TIMEOUT`` for the standby, and
    a run starts only with one renewal interval of its lease left: with a
    shorter lease, a claim the standby acknowledged late steps aside instead
    of running, and its window waits for the next instance.
    """
    alias = _claims_database_in(app_configs, databases)
    if alias is None or not standby.commits_wait_for_a_standby(connections[alias]):
        return []
    wait = jobclaims_settings.standby_timeout
    needed = leases.shortest_covering(wait)
    default = jobclaims_settings.default_lease
    given = {"JOBCLAIMS['DEFAULT_LEASE']": default}
    try:
        scheduled = discovery.scheduled_jobs()
    except ValueError:  # jobclaims.E005 says what is wrong with a schedule.
        scheduled = []
    given.update({f"{job.job}'s lease": job.lease for job in scheduled if job.lease != default})
    return [
        Warning(
            f"{name} is {lease.total_seconds():g} s, and a commit on the {alias!r} database "
            f"may wait {wait.total_seconds():g} s for its synchronous standby "
            "(JOBCLAIMS['STANDBY_TIMEOUT']): a claim acknowledged that late has less than "
            "a third of its lease left, so it steps aside instead of running.",
            hint=(
                f"Give it a lease of at least {needed.total_seconds():g} s, or lower "
                f"JOBCLAIMS['STANDBY_TIMEOUT'] below {lease.total_seconds() * 2 / 3:g} s. "
                + _see("jobclaims-w004-a-lease-shorter-than-a-standby-may-stall-a-commit")
            ),
            id="jobclaims.W004",
        )
        for name, lease in given.items()
        if lease < needed
    ]


def _claims_database_in(
    app_configs: Sequence[AppConfig] | None, databases: Sequence[str] | None
) -> str | None:
    """The claims database, if the checker asked for it and the settings are sound."""
    if not _concerns_jobclaims(app_configs) or not databases or conf.problems():
        return None
    alias = jobclaims_settings.claims_database(JobRun)
    return alias if alias in databases else None


def _file_lock_hint(alias: str) -> str:
    """Advice for a database that locks its whole file instead of rows."""
    connection = connections[alias]
    options = connection.settings_dict.get("OPTIONS", {})
    advice = []
    # Backends with this attribute (SQLite, Django 5.1+) accept
    # OPTIONS["transaction_mode"]. IMMEDIATE takes the write lock when a
    # transaction starts, so a contender waits for it instead of failing
    # with "database is locked" when it first writes.
    if hasattr(connection, "transaction_modes") and (
        str(options.get("transaction_mode", "")).upper() != "IMMEDIATE"
    ):
        advice.append(f"DATABASES[{alias!r}]['OPTIONS']['transaction_mode'] = 'IMMEDIATE'")
    if "timeout" not in options:
        advice.append(
            f"DATABASES[{alias!r}]['OPTIONS']['timeout'] = 20 "
            "(seconds to wait for the lock before failing)"
        )
    multi_host = (
        "Run every instance on this host, or write claims to PostgreSQL or "
        "MariaDB/MySQL when jobs run on several hosts"
    )
    if advice:
        return f"{multi_host}; and set " + " and ".join(advice) + "."
    return f'{multi_host}. Silence this with SILENCED_SYSTEM_CHECKS = ["jobclaims.W001"].'


def _sentence(text: str) -> str:
    """``text``, a clause the scheduler words too, as a sentence of its own."""
    return f"{text[:1].upper()}{text[1:]}."


def _see(anchor: str) -> str:
    """Where the checks page explains a check: its hint's last sentence."""
    return f"See {page('checks', anchor)}."


def _concerns_jobclaims(app_configs: Sequence[AppConfig] | None) -> bool:
    """False when ``manage.py check some_app`` names other apps only."""
    return app_configs is None or any(config.name == "jobclaims" for config in app_configs)
