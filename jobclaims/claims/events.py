"""What happens to claims, told to signal receivers and to the log.

Log records go to the ``jobclaims`` logger with ``job``, ``window``,
``owner`` and ``attempt`` as structured fields (``extra``), so a JSON log
formatter can index them. Skips are INFO: stepping aside is normal.

Signals are sent robustly: a receiver is there to count or to alert, and
one that raises must not stop the claim it hears about. Raised from
``claim_acquired``, its error would leave the claim running and the job not
run, blocking the window until the lease ran out. Its error is logged, with
its traceback, and every other receiver still runs.
"""

from __future__ import annotations

import datetime
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.dispatch import Signal
from django.utils import timezone

from jobclaims import signals
from jobclaims.conf import jobclaims_settings

if TYPE_CHECKING:
    from jobclaims.claims.rule import Refusal
    from jobclaims.claims.statements import ClaimRow

logger = logging.getLogger("jobclaims")


def _fields(run: ClaimRow) -> dict[str, object]:
    return {"job": run.job, "window": run.window, "owner": run.owner, "attempt": run.attempt}


def acquired(run: ClaimRow, previous_status: str | None) -> None:
    logger.info("Claimed %s %s (attempt %d)", run.job, run.window, run.attempt, extra=_fields(run))
    _warn_of_clock_skew(run)
    _send("claim_acquired", type(run), _fields(run), run=run)
    if previous_status is not None:
        logger.info(
            "Took over %s %s from a %s run",
            run.job,
            run.window,
            previous_status,
            extra={**_fields(run), "previous_status": previous_status},
        )
        _send(
            "claim_taken_over",
            type(run),
            _fields(run),
            run=run,
            previous_status=previous_status,
        )


def _warn_of_clock_skew(run: ClaimRow) -> None:
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


def skipped(model: type[Any], refusal: Refusal) -> None:
    """Announce a refusal, with the row that refused the claim when it read one."""
    fields: dict[str, object] = {"job": refusal.job, "window": refusal.window}
    logger.info(
        "Skipped %s %s: %s",
        refusal.job,
        refusal.window,
        refusal,
        extra={**fields, **refusal.fields()},
    )
    _send(
        "claim_skipped",
        model,
        fields,
        job=refusal.job,
        window=refusal.window,
        reason=refusal.reason,
        refusal=refusal,
    )


def skip_not_recorded(job: str, window: str, reason: str, error: Exception) -> None:
    logger.warning(
        "Could not record the skip of %s %s (%s): %s",
        job,
        window,
        reason,
        error,
        extra={"job": job, "window": window, "reason": reason},
    )


def finished(run: ClaimRow, read_finished_at: Callable[[], datetime.datetime | None]) -> None:
    """Announce the outcome, and the duration when anyone listens for it.

    The duration needs ``finished_at``, which the database clock set in the
    release's UPDATE. The release returns it (``ClaimStatements.release()``)
    but on an SQLite older than 3.35, or after a release whose answer was
    lost: then ``read_finished_at`` reads it back, only if a receiver or an
    enabled log level will use it.
    """
    if not (signals.run_finished.has_listeners() or logger.isEnabledFor(logging.INFO)):
        return
    finished_at = read_finished_at()
    duration = None if finished_at is None else finished_at - run.claimed_at
    if duration is None:
        logger.info(
            "Finished %s %s: %s; taken over since, so its duration is unknown",
            run.job,
            run.window,
            run.status,
            extra={**_fields(run), "status": run.status, "duration": None},
        )
    else:
        logger.info(
            "Finished %s %s: %s in %.3f s",
            run.job,
            run.window,
            run.status,
            duration.total_seconds(),
            extra={**_fields(run), "status": run.status, "duration": duration},
        )
    _send("run_finished", type(run), _fields(run), run=run, status=run.status, duration=duration)


def _send(name: str, sender: type[Any], fields: dict[str, object], **named: Any) -> None:
    """Send the signal ``name`` to every receiver, and log each receiver's error.

    Django logs it too, on ``django.dispatch``; here it goes to the
    ``jobclaims`` logger with the claim's fields, beside the claim's story.
    """
    signal: Signal = getattr(signals, name)
    for receiver, response in signal.send_robust(sender, **named):
        if isinstance(response, Exception):
            receiver_name = getattr(receiver, "__qualname__", repr(receiver))
            logger.error(
                "A receiver of %s, %s, raised %s: %s; the claim went on without it",
                name,
                receiver_name,
                type(response).__name__,
                response,
                exc_info=response,
                extra={**fields, "receiver": receiver_name},
            )
