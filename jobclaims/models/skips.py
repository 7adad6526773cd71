"""The instances that stepped aside for a window, counted by reason."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from jobclaims.claims import rule
from jobclaims.models.managers import ClaimsDatabaseManager
from jobclaims.time.clock import DatabaseNow


class JobSkip(models.Model):
    """Instances that stepped aside for one window of a job, for one reason.

    One row per job, window and reason, however many instances stepped
    aside: each skip adds one to ``count`` and leaves its owner and time as
    the last. Two beats sending a task every second would otherwise add a
    row per duplicate, 150,000 a day (docs/performance.md). Skips have a
    table of their own, written with one statement that never touches a
    claim row, so recording a skip never slows the holder.
    """

    Reason = rule.Reason

    job = models.CharField(_("job"), max_length=200)
    window = models.CharField(_("window"), max_length=64)
    owner = models.CharField(_("last skipped by"), max_length=255)
    reason = models.CharField(_("reason"), max_length=16, choices=Reason)
    count = models.PositiveIntegerField(_("times skipped"), default=1)
    skipped_at = models.DateTimeField(_("last skipped at"), db_default=DatabaseNow())

    objects = ClaimsDatabaseManager["JobSkip"]()

    class Meta:
        verbose_name = _("job skip")
        verbose_name_plural = _("job skips")
        constraints = [
            models.UniqueConstraint(
                fields=["job", "window", "reason"], name="jobclaims_skip_window_reason_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["job", "window", "skipped_at"], name="jobclaims_skip_window_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job} {self.window} skipped {self.count} times, last by {self.owner}"
