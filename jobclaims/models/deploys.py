"""What the deploys ran: the schedulers alive, each job's schedules, the commands known.

Health reads these rows to tell a job that is late from one no deploy
schedules any more, and hosts that agree from a half-rolled deploy.
"""

from __future__ import annotations

import datetime

from django.db import models
from django.utils.translation import gettext_lazy as _

from jobclaims.conf import jobclaims_settings
from jobclaims.models.managers import ClaimsDatabaseManager
from jobclaims.time.clock import DatabaseNow


class SchedulerSeen(models.Model):
    """A scheduler process that was alive, and the schedules it ran.

    Each ``jobclaims_scheduler`` writes its row as it starts and again at
    most every ``jobclaims.scheduling.seen.SEEN_EVERY``, so that health can tell "no
    scheduler runs" and "two hosts run different schedules" (a half-rolled
    deploy) from the rows of the live ones. One that stops cleanly (a stop
    signal, the end of ``--once``) writes ``stopped_at``: it is gone at once,
    where one killed is live until ``SCHEDULER_GRACE`` has passed.
    """

    host = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("process id"))
    fingerprint = models.CharField(
        _("fingerprint"),
        max_length=16,
        help_text=_("A digest of the schedules the scheduler runs: equal on hosts that agree."),
    )
    schedules = models.JSONField(
        _("schedules"), default=dict, help_text=_("Each job's schedule, by job name.")
    )
    started_at = models.DateTimeField(_("started at"), db_default=DatabaseNow())
    last_seen_at = models.DateTimeField(_("last seen at"), db_default=DatabaseNow())
    stopped_at = models.DateTimeField(
        _("stopped at"),
        null=True,
        blank=True,
        help_text=_("When it stopped cleanly: from then on it is no longer live."),
    )

    objects = ClaimsDatabaseManager["SchedulerSeen"]()

    class Meta:
        verbose_name = _("scheduler seen")
        verbose_name_plural = _("schedulers seen")
        constraints = [
            models.UniqueConstraint(
                fields=["host", "pid", "started_at"], name="jobclaims_scheduler_seen_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["last_seen_at"], name="jobclaims_seen_last_seen_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"

    def live_at(self, now: datetime.datetime) -> bool:
        """Whether it runs at ``now`` (the database clock): not stopped, and
        seen within ``JOBCLAIMS["SCHEDULER_GRACE"]``."""
        return self.stopped_at is None and self.last_seen_at >= now - (
            jobclaims_settings.scheduler_grace
        )


class ScheduleVersion(models.Model):
    """When a job's schedule came into force, one row per schedule it had.

    Catching up counts only the fires a schedule had due while it was in
    force: a fire from before ``since`` was never due, whatever claims a
    backfill or an older schedule left (``jobclaims.scheduling.schedule_versions``).
    """

    job = models.CharField(_("job"), max_length=200)
    fingerprint = models.CharField(
        _("fingerprint"),
        max_length=16,
        help_text=_("A digest of the schedule and the time zone it is read in."),
    )
    schedule = models.CharField(_("schedule"), max_length=255)
    since = models.DateTimeField(_("in force since"), db_default=DatabaseNow())

    objects = ClaimsDatabaseManager["ScheduleVersion"]()

    class Meta:
        verbose_name = _("schedule version")
        verbose_name_plural = _("schedule versions")
        constraints = [
            models.UniqueConstraint(
                fields=["job", "fingerprint"], name="jobclaims_schedule_version_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job} {self.schedule!r} since {self.since}"


class KnownCommand(models.Model):
    """A ``JobCommand`` some deploy's code had, recorded by ``migrate`` as
    content types are (``jobclaims.jobs.discovery``).

    Health reads it to tell a job removed from the code, which is gone, from
    one run through ``claim()``, ``@claimed`` or Celery, which no code lists.
    """

    job = models.CharField(_("job"), max_length=200)
    first_seen_at = models.DateTimeField(_("first seen at"), db_default=DatabaseNow())

    objects = ClaimsDatabaseManager["KnownCommand"]()

    class Meta:
        verbose_name = _("known command")
        verbose_name_plural = _("known commands")
        constraints = [models.UniqueConstraint(fields=["job"], name="jobclaims_known_command_uniq")]

    def __str__(self) -> str:
        return self.job
