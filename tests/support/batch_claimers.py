"""A warm process that claims many fires at one instant, as a scheduler's look does.

``python -m tests.support.batch_claimers FIRES`` sets Django up, says
``ready`` and blocks on the trigger pipe (``BATCH_TRIGGER_FD``) that the
test writes to once every claimer is ready. It then claims jobs
``batch_0000`` to ``batch_<FIRES - 1>``, window ``TODAY``, in one batch
(``JobRun.objects.try_claim_many()``), and each fire the batch left
unsettled alone, as the scheduler does, and prints one JSON line: the
fires it won, how many it lost, how many it claimed alone, and the
statements it sent.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobclaims.claims.batch import Fire

WINDOW = "TODAY"
LEASE = datetime.timedelta(minutes=5)


def fires(count: int) -> list[Fire]:

    # Each job's series of its own, as each scheduled job's is.
    from jobclaims.claims.batch import Fire

    return [
        Fire(f"batch_{number:04d}", WINDOW, LEASE, series=f"series-{number:04d}")
        for number in range(count)
    ]


def main(count: int) -> None:
    from django.db import connection

    from jobclaims.claims.rule import Refusal
    from jobclaims.models import JobRun

    wanted = fires(count)
    print("ready", flush=True)
    os.read(int(os.environ["BATCH_TRIGGER_FD"]), 1)
    statements: list[str] = []

    def count_statement(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, many, context)

    won: list[str] = []
    lost = alone = 0
    with connection.execute_wrapper(count_statement):
        outcomes = JobRun.objects.try_claim_many(wanted)
        batch_statements = len(statements)
        for fire, outcome in zip(wanted, outcomes, strict=True):
            if outcome is None:
                alone += 1
                outcome = JobRun.objects.try_claim(
                    fire.job, fire.window, lease=LEASE, series=fire.series, take_failed=False
                )
            if isinstance(outcome, Refusal):
                lost += 1
            else:
                won.append(outcome.job)
    said = {"won": won, "lost": lost, "alone": alone, "batch_statements": batch_statements}
    print(json.dumps(said), flush=True)


if __name__ == "__main__":
    from jobclaims.running.children import connect_child

    connect_child()
    main(int(sys.argv[1]))
