"""Operators' orders about a job: pause it, or retire it from health's watch."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from jobclaims.claims import naming
from jobclaims.models.managers import ClaimsDatabaseManager
from jobclaims.time.clock import DatabaseNow


class JobPauseQuerySet(models.QuerySet["JobPause"]):
    """Pauses, judged by the database's clock like claims are."""

    def in_force(self) -> JobPauseQuerySet:
        """Pauses not resumed, whose ``until`` (if any) has not come yet."""
        return self.filter(resumed_at__isnull=True).filter(
            Q(until__isnull=True) | Q(until__gt=DatabaseNow())
        )


_JobPauseManagerBase = ClaimsDatabaseManager.from_queryset(JobPauseQuerySet)


class JobPauseManager(_JobPauseManagerBase["JobPause"]):
    """Pauses, read and written in the claims database."""


class JobPause(models.Model):
    """An operator's order that a job start no run: who gave it, when, why and until when.

    Every claim of the job asks for it before it takes a claim row
    (``jobclaims.claims.engine``), so a pause holds however the job starts.
    A pause of ``naming.ALL_JOBS`` holds for every job.
    A resumed pause keeps its row, with who resumed it and when: the rows
    are the job's pause history.
    """

    job = models.CharField(_("job"), max_length=200)
    paused_by = models.CharField(
        _("paused by"),
        max_length=150,
        help_text=_("The OS user of the command, or the admin user, that paused the job."),
    )
    reason = models.TextField(_("reason"), blank=True)
    paused_at = models.DateTimeField(_("paused at"), db_default=DatabaseNow())
    until = models.DateTimeField(
        _("until"),
        null=True,
        blank=True,
        help_text=_("The pause ends by itself at this time; empty: until resumed."),
    )
    resumed_by = models.CharField(_("resumed by"), max_length=150, blank=True)
    resumed_at = models.DateTimeField(_("resumed at"), null=True, blank=True)

    objects = JobPauseManager()

    class Meta:
        verbose_name = _("job pause")
        verbose_name_plural = _("job pauses")
        get_latest_by = "paused_at"
        indexes = [
            # Every claim looks up its job's pauses not resumed.
            models.Index(fields=["job", "resumed_at"], name="jobclaims_pause_job_idx"),
        ]

    def __str__(self) -> str:
        whose = "all jobs" if self.job == naming.ALL_JOBS else self.job
        return f"{whose} paused by {self.paused_by}"


class RetiredJob(models.Model):
    """A job an operator retired: removed or renamed in the code, so that
    health stops watching it, while its claims stay for history.

    A claim of the job made after ``retired_at`` brings it back under watch
    (``jobclaims.monitoring.health_reads``): a job that runs again is not retired.
    """

    job = models.CharField(_("job"), max_length=200)
    retired_by = models.CharField(
        _("retired by"), max_length=150, help_text=_("The OS user or admin user who retired it.")
    )
    retired_at = models.DateTimeField(_("retired at"), db_default=DatabaseNow())
    reason = models.TextField(_("reason"), blank=True)

    objects = ClaimsDatabaseManager["RetiredJob"]()

    class Meta:
        verbose_name = _("retired job")
        verbose_name_plural = _("retired jobs")
        constraints = [models.UniqueConstraint(fields=["job"], name="jobclaims_retired_job_uniq")]

    def __str__(self) -> str:
        return self.job


class JobTag(models.Model):
    """A tag a job's code gives it (``JobCommand.tags``), by which one pause
    holds for every job that has it.

    Each deploy records its code's tags at ``migrate`` (and a pause of a tag
    records them again), so that a claim asks for the pauses of its job's
    tags in the same read as its own: a pause of ``#billing`` holds for
    every job tagged ``billing``, however it starts. ``tag`` is stored as its
    pause is named, with ``naming.TAG_MARK`` before it.
    """

    job = models.CharField(_("job"), max_length=200)
    tag = models.CharField(_("tag"), max_length=101)

    objects = ClaimsDatabaseManager["JobTag"]()

    class Meta:
        verbose_name = _("job tag")
        verbose_name_plural = _("job tags")
        constraints = [
            # Every claim looks up its job's tags by the job.
            models.UniqueConstraint(fields=["job", "tag"], name="jobclaims_job_tag_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.job} {self.tag}"
