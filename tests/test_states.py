"""The takeover rule: its Python and its SQL agree on every state a row can be in."""

from __future__ import annotations

import pytest
from django.db.models import BooleanField, ExpressionWrapper, Q

from jobclaims.clock import DatabaseNow
from jobclaims.models import JobRun
from jobclaims.states import State, frees, frees_q
from tests.factories import claim_in_state

pytestmark = pytest.mark.django_db

WINDOW = "2026-11-29"


@pytest.mark.parametrize("force", [False, True])
def test_the_takeover_rule_in_python_and_in_sql_frees_the_same_rows(force):
    # Each state twice, in a job of its own: as the claimed window's row,
    # and as a run of another window.
    for state in State:
        claim_in_state(state, job=state, window=WINDOW)
        claim_in_state(state, job=state, window="another window")
    lapsed = ExpressionWrapper(Q(expires_at__lte=DatabaseNow()), output_field=BooleanField())
    rows = JobRun.objects.annotate(lapsed=lapsed)
    by_python = {
        (job, window)
        for job, window, status, lapsed in rows.values_list("job", "window", "status", "lapsed")
        if frees(window, status, lapsed, WINDOW, force)
    }
    by_sql = set(rows.filter(frees_q(WINDOW, force)).values_list("job", "window"))
    assert by_python == by_sql
    # What they agree on is the rule: the window's failed or dead row (and,
    # forced, its succeeded one); another window's run once its lease ended.
    own = {job for job, window in by_sql if window == WINDOW}
    assert own == {State.EXPIRED, State.FAILED} | ({State.SUCCEEDED} if force else set())
    others = {job for job, window in by_sql if window != WINDOW}
    assert State.EXPIRED in others
    assert State.ACTIVE not in others
