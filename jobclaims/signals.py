"""Signals sent as claims change hands, for metrics and alerts.

Each is sent with ``sender=JobRun``. Receivers run in the claiming process,
after the claim's statement committed, so a slow receiver delays the job,
never another instance. They are sent robustly: a receiver that raises is
logged on the ``jobclaims`` logger, with its traceback, and the claim, the
job and the other receivers go on (see ``jobclaims.claims.events``).
"""

from __future__ import annotations

from django.dispatch import Signal

#: A run took a window: ``run`` (attempt 1 for a window's first claim).
claim_acquired = Signal()

#: A run took over a window another run held: ``run`` and ``previous_status``
#: ("running" when its holder's lease ran out, "failed", or "succeeded" with
#: force). Sent after ``claim_acquired``.
claim_taken_over = Signal()

#: An instance stepped aside: ``job``, ``window`` and ``reason``, one of
#: "held" (another instance holds the window), "succeeded" (it already ran)
#: or "overlap" (a run of another window still holds the job); and
#: ``refusal`` (``jobclaims.claims.rule.Refusal``), which names the row that
#: refused the claim: its window, holder, status and lease end.
claim_skipped = Signal()

#: A run recorded its outcome: ``run``, ``status`` ("succeeded" or "failed")
#: and ``duration`` (a timedelta, by the database clock; None when another
#: instance took the window over before the finish time could be read).
run_finished = Signal()
