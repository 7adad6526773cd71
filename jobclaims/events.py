"""What happens to claims, told to signal receivers and to the log.

Log records go to the ``jobclaims`` logger with ``job``, ``window``,
``owner`` and ``attempt`` as structured fields (``extra``), so a JSON log
formatter can index them. Skips are INFO: stepping aside is normal.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING

from django.utils import timezone

from jobclaims import signals
from jobclaims.conf import jobclaims_settings

if TYPE_CHECKING:
    from jobclaims.models import JobRun

logger = logging.getLogger("jobclaims")


def _fields(run: JobRun) -> dict[str, object]:
    return {"job": run.job, "window": run.window, "owner": run.owner, "attempt": run.attempt}


def acquired(run: JobRun, previous_status: str | None) -> None:
    logger.info("Claimed %s %s (attempt %d)", run.job, run.window, run.attempt, extra=_fields(run))
    _warn_of_clock_skew(run)
    signals.claim_acquired.send(type(run), run=run)
    if previous_status is not None:
        logger.info(
            "Took over %s %s from a %s run",
            run.job,
            run.window,
            previous_status,
            extra={**_fields(run), "previous_status": previous_status},
        )
        signals.claim_taken_over.send(type(run), run=run, previous_status=previous_status)


def _warn_of_clock_skew(run: JobRun) -> None:
    """Warn when this host's clock is far from the database's.

    Claims never read the host's clock, so they stay exact; but the rest of
    the host's software (cron itself, log timestamps, the job's own
    ``timezone.now()``) does. The claim was just stamped by the database, so
    comparing costs no query.
    """
    offset = timezone.now() - run.claimed_at
    if abs(offset) > jobclaims_settings.clock_skew_warning:
        logger.warning(
            "The clock of host %s is %+.1f s off the database's; claims use the "
            "database's clock, but cron and this host's other software do not",
            socket.gethostname(),
            offset.total_seconds(),
            extra={**_fields(run), "host": socket.gethostname(), "clock_offset": offset},
        )


def skipped(model: type[JobRun], job: str, window: str, reason: str) -> None:
    logger.info(
        "Skipped %s %s: %s",
        job,
        window,
        reason,
        extra={"job": job, "window": window, "reason": reason},
    )
    signals.claim_skipped.send(model, job=job, window=window, reason=reason)


def skip_not_recorded(job: str, window: str, reason: str, error: Exception) -> None:
    logger.warning(
        "Could not record the skip of %s %s (%s): %s",
        job,
        window,
        reason,
        error,
        extra={"job": job, "window": window, "reason": reason},
    )


def finished(run: JobRun) -> None:
    """Announce the outcome, and the duration when anyone listens for it.

    The duration needs ``finished_at``, which the database clock set: it is
    read back only if a receiver or an enabled log level will use it.
    """
    if not (signals.run_finished.has_listeners() or logger.isEnabledFor(logging.INFO)):
        return
    finished_at = run.finished_at
    assert finished_at is not None, "release() set it before announcing the outcome"
    duration = finished_at - run.claimed_at
    logger.info(
        "Finished %s %s: %s in %.3f s",
        run.job,
        run.window,
        run.status,
        duration.total_seconds(),
        extra={**_fields(run), "status": run.status, "duration": duration},
    )
    signals.run_finished.send(type(run), run=run, status=run.status, duration=duration)
