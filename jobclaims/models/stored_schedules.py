"""Schedules operators keep in the database, beside those the code declares.

A ``StoredSchedule`` runs a ``JobCommand`` with arguments at the fires of
an expression, as a ``Schedule`` in a command's ``schedules`` would: its
claims are named ``command[name]``, as a code schedule named ``name``'s are.
Or it enqueues a task (a Celery or Django task) with arguments, as a task
schedule does (``jobclaims.jobs.task_schedules``), under ``job[name]``.
Its fields are written as a ``Schedule``'s (``start="2026-12-01"``,
``skip_dates="2026-12-25 2027-01-01"``), so that moving a schedule from
the admin into the code, or back, changes no spelling.

Every change to them (``jobclaims.controls.schedule_edits``, the admin)
adds one to the single ``StoredSchedulesGeneration`` row in the same
transaction: a scheduler reads that one row at each look, whatever the
number of schedules, and reads the schedules again only when it moved.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from jobclaims.models.managers import ClaimsDatabaseManager
from jobclaims.time.clock import DatabaseNow

#: The overlap policies, as the admin offers them (``jobclaims.jobs.schedules.Overlap``).
OVERLAP_CHOICES = [
    ("skip", _("skip: run nothing for a fire that finds the last run going")),
    ("allow", _("allow: run it beside the last run")),
    ("buffer", _("buffer: run it once the last run ends (one waits at most)")),
    ("replace", _("replace: cancel the last run, then run it")),
]


class StoredSchedule(models.Model):
    """A schedule an operator added at runtime: a command, its arguments, when it fires."""

    name = models.CharField(
        _("name"),
        max_length=100,
        unique=True,
        help_text=_(
            "Names its runs: COMMAND[NAME]. Keep it across edits: the runs of a new name "
            "are another job's."
        ),
    )
    command = models.CharField(
        _("command"),
        max_length=100,
        blank=True,
        help_text=_(
            "The JobCommand that runs at each fire, by its management command name; "
            "empty for a task."
        ),
    )
    arguments = models.CharField(
        _("arguments"),
        max_length=1000,
        blank=True,
        help_text=_("Passed to the command at each fire, as in a shell: --region eu."),
    )
    task = models.CharField(
        _("task"),
        max_length=200,
        blank=True,
        help_text=_(
            "Instead of a command: the Celery or Django task each fire enqueues, by its "
            "dotted path (billing.tasks.nightly_report)."
        ),
    )
    task_args = models.JSONField(
        _("task's arguments"),
        default=list,
        blank=True,
        help_text=_('The task\'s positional arguments, a JSON list: ["eu", 3].'),
    )
    task_kwargs = models.JSONField(
        _("task's keyword arguments"),
        default=dict,
        blank=True,
        help_text=_('The task\'s keyword arguments, a JSON object: {"region": "eu"}.'),
    )
    expression = models.CharField(
        _("schedule"),
        max_length=200,
        help_text=_(
            "A cron expression (0 3 * * *), an interval (every 90 minutes) or a one-off "
            "(at 2026-12-24T18:00)."
        ),
    )
    time_zone = models.CharField(
        _("time zone"),
        max_length=64,
        blank=True,
        help_text=_("The IANA zone the schedule is read in; empty: the command's, else TIME_ZONE."),
    )
    start = models.CharField(
        _("start"),
        max_length=32,
        blank=True,
        help_text=_("No fire before this date or date-time, in the schedule's zone."),
    )
    end = models.CharField(
        _("end"),
        max_length=32,
        blank=True,
        help_text=_("No fire after this date (its whole day) or date-time."),
    )
    skip_dates = models.CharField(
        _("skip dates"),
        max_length=1000,
        blank=True,
        help_text=_("Dates with no fire, apart by spaces: 2026-12-25 2027-01-01."),
    )
    max_runs = models.PositiveIntegerField(
        _("max runs"),
        null=True,
        blank=True,
        help_text=_("Only the first this many fires from start; needs a start."),
    )
    overlap = models.CharField(
        _("overlap"),
        max_length=16,
        blank=True,
        choices=OVERLAP_CHOICES,
        help_text=_("What a fire that finds the last run still going does; empty: the command's."),
    )
    version = models.PositiveIntegerField(
        _("version"),
        default=1,
        help_text=_("Counts its edits: an edit made from an older version is refused."),
    )
    created_by = models.CharField(_("created by"), max_length=150)
    created_at = models.DateTimeField(_("created at"), db_default=DatabaseNow())
    changed_by = models.CharField(_("changed by"), max_length=150)
    changed_at = models.DateTimeField(_("changed at"), db_default=DatabaseNow())

    objects = ClaimsDatabaseManager["StoredSchedule"]()

    class Meta:
        verbose_name = _("stored schedule")
        verbose_name_plural = _("stored schedules")
        ordering = ["command", "name"]

    def __str__(self) -> str:
        return f"{self.command or self.task}[{self.name}]"


class StoredSchedulesGeneration(models.Model):
    """One row: how many changes the stored schedules have had, for the
    schedulers to notice one by a single-row read.

    Each change adds one by an ``UPDATE``, which holds the row until its
    transaction ends: changes commit in the order of their numbers, so a
    scheduler that read number N sees every change up to N.
    """

    number = models.PositiveBigIntegerField(_("number"), default=0)

    objects = ClaimsDatabaseManager["StoredSchedulesGeneration"]()

    class Meta:
        verbose_name = _("stored schedules generation")
        verbose_name_plural = _("stored schedules generations")

    def __str__(self) -> str:
        return f"stored schedules, change {self.number}"
