"""The takeover rule: its Python and its SQL agree on every state a row can be in."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.test.utils import CaptureQueriesContext

from jobclaims.claims.rule import Reason, Refusal, State, frees, frees_q
from jobclaims.models import JobRun, JobSkip
from jobclaims.time.clock import DatabaseNow, database_now
from tests.support.factories import cancelled_while_held, claim_in_state

pytestmark = pytest.mark.django_db

WINDOW = "2026-11-29"
MINUTE = datetime.timedelta(minutes=1)
#: A run an operator cancelled, whose process has not let go of it yet.
HELD_CANCELLED = "cancelled, its lease held"


@pytest.mark.parametrize("take_failed", [True, False], ids=["any claim", "a scheduler's look"])
@pytest.mark.parametrize("force", [False, True])
def test_the_takeover_rule_in_python_and_in_sql_frees_the_same_rows(force, take_failed):
    # Each state twice, in a job of its own: as the claimed window's row,
    # and as a run of another window.
    for state in State:
        claim_in_state(state, job=state, window=WINDOW)
        claim_in_state(state, job=state, window="another window")
    # Cancelled, its process not stopped yet: it holds the window and the job.
    cancelled_while_held(job=HELD_CANCELLED, window=WINDOW)
    cancelled_while_held(job=HELD_CANCELLED, window="another window", holds_job=None)
    lapsed = ExpressionWrapper(Q(expires_at__lte=DatabaseNow()), output_field=BooleanField())
    rows = JobRun.objects.annotate(lapsed=lapsed)
    by_python = {
        (job, window)
        for job, window, status, lapsed in rows.values_list("job", "window", "status", "lapsed")
        if frees(window, status, lapsed, WINDOW, force, take_failed)
    }
    by_sql = set(rows.filter(frees_q(WINDOW, force, take_failed)).values_list("job", "window"))
    assert by_python == by_sql
    # What they agree on is the rule: the window's failed, retrying, timed
    # out, dead or cancelled row, once let go (and, forced, its succeeded
    # one); another window's run once its lease ended.
    own = {job for job, window in by_sql if window == WINDOW}
    # A scheduler's look at a fire leaves its retries to the retry policy.
    ended = {State.FAILED, State.RETRYING, State.TIMED_OUT, State.CANCELLED}
    opened = {State.EXPIRED} | (ended if take_failed else set())
    assert own == opened | ({State.SUCCEEDED} if force else set())
    assert HELD_CANCELLED not in own
    others = {job for job, window in by_sql if window != WINDOW}
    assert State.EXPIRED in others
    assert State.ACTIVE not in others
    assert HELD_CANCELLED not in others


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("state", [*State, HELD_CANCELLED])
@pytest.mark.parametrize("own_window", [True, False], ids=["own window", "another window"])
def test_a_claim_that_needs_no_details_is_refused_by_the_rule_in_two_statements(state, own_window):
    # The SQL of skip_if_blocked(), a third form of the rule, against the
    # Python one; the scheduler's losing hosts claim this way.
    window = WINDOW if own_window else "another window"
    if state == HELD_CANCELLED:
        row = cancelled_while_held(job="job", window=window)
    else:
        row = claim_in_state(state, job="job", window=window)
    lapsed = row.expires_at <= database_now()
    in_the_way = own_window or row.holds_job is not None
    refused = in_the_way and not frees(row.window, row.status, lapsed, WINDOW, force=False)

    with CaptureQueriesContext(connection) as queries:
        outcome = JobRun.objects.try_claim("job", WINDOW, lease=MINUTE, details=False)

    assert isinstance(outcome, Refusal) == refused
    if isinstance(outcome, Refusal):
        expected = Reason.OVERLAP if not own_window else Reason.HELD
        if own_window and state == State.SUCCEEDED:
            expected = Reason.SUCCEEDED
        assert outcome.reason == expected
        assert list(JobSkip.objects.values_list("reason", "count")) == [(expected, 1)]
        # The pause read, the INSERT that met a row (which asks for the pause
        # itself on PostgreSQL, the read coming after it), then the skip that
        # read the row (SQLite: the pause read, the read, then the skip).
        assert len(queries) == 3, [query["sql"] for query in queries]
