"""PostgreSQL's claim statements, written whole, and its errors that mean "try again".

Every time is ``STATEMENT_TIMESTAMP()``: the database's clock, one moment
throughout a statement. ``%(name)s`` are the statement's parameters; the
names of tables and columns are the models' own (tests/test_sql.py holds
them together).
"""

from __future__ import annotations

import datetime

#: A claim of a window nobody holds, in one statement that never waits: it
#: inserts nothing where the job is paused (a pause not resumed whose
#: ``until`` has not come), or a unique key is taken (a row holds the window
#: or the job), and fails at once, rather than wait, where another
#: transaction is writing that key. The lock timeout is set for this
#: statement's own transaction, before the insert checks the keys; 1 ms,
#: since 0 turns it off. The (job, resumed_at) index finds the pauses; a
#: pause of the job a schedule's claim name belongs to holds for it too
#: (``jobclaims.schedule_names``).
INSERT_UNLESS_TAKEN = """
INSERT INTO jobclaims_jobrun
    (job, "window", schedule, owner, token, holds_job, slot_start, slot_end,
     status, attempt, failures, error, claimed_at, expires_at)
SELECT %(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
       %(slot_start)s, %(slot_end)s,
       'running', 1, 0, '', STATEMENT_TIMESTAMP(), STATEMENT_TIMESTAMP() + %(lease)s
FROM (SELECT set_config('lock_timeout', '1', true)) AS no_wait
WHERE NOT EXISTS (
    SELECT FROM jobclaims_jobpause
    WHERE job IN (%(job)s, %(parent_job)s) AND resumed_at IS NULL
      AND ("until" IS NULL OR "until" > STATEMENT_TIMESTAMP()))
ON CONFLICT DO NOTHING
RETURNING id, claimed_at, expires_at
"""

#: The newest pause in force of the job, or of the job a schedule's claim
#: name belongs to: not resumed, and its ``until`` (if any) not come. The
#: (job, resumed_at) index finds it.
PAUSE = """
SELECT paused_by, paused_at, reason, "until"
FROM jobclaims_jobpause
WHERE job IN (%(job)s, %(parent_job)s) AND resumed_at IS NULL
  AND ("until" IS NULL OR "until" > STATEMENT_TIMESTAMP())
ORDER BY paused_at DESC, id DESC
LIMIT 1
"""

#: The window's first claim after a read found no row in its way;
#: ``IntegrityError`` when a contender inserted first.
INSERT = """
INSERT INTO jobclaims_jobrun
    (job, "window", schedule, owner, token, holds_job, slot_start, slot_end,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES (%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
        %(slot_start)s, %(slot_end)s,
        'running', 1, 0, '', STATEMENT_TIMESTAMP(), STATEMENT_TIMESTAMP() + %(lease)s)
"""

INSERT_RETURNING = INSERT.rstrip() + "\nRETURNING id, claimed_at, expires_at\n"

#: What a claim reads back after ``INSERT`` where Django is told an INSERT
#: cannot return rows.
READ_BACK = """
SELECT id, claimed_at, expires_at
FROM jobclaims_jobrun
WHERE job = %(job)s AND "window" = %(window)s AND token = %(token)s
"""

#: The rows in the way of a claim of a window that may overlap the job's
#: other runs: the window's own, and whether its lease had ended.
WINDOW_ROWS = """
SELECT "window", status, owner, expires_at, finished_at,
       expires_at <= STATEMENT_TIMESTAMP() AS lapsed
FROM jobclaims_jobrun
WHERE job = %(job)s AND "window" = %(window)s
"""

#: The rows in the way of a claim that holds the job: the window's own and
#: the job's holder. Each side of the OR is a lookup on one unique index.
WINDOW_AND_HOLDER_ROWS = """
SELECT "window", status, owner, expires_at, finished_at,
       expires_at <= STATEMENT_TIMESTAMP() AS lapsed
FROM jobclaims_jobrun
WHERE (job = %(job)s AND "window" = %(window)s)
   OR (job = %(job)s AND holds_job IS NOT NULL)
"""

#: One more instance stepped aside: each window's skips for one reason land
#: on one row. Waits only for another skip's statement on that row, never
#: for a claim row.
SKIP = """
INSERT INTO jobclaims_jobskip (job, "window", owner, reason, count, skipped_at)
VALUES (%(job)s, %(window)s, %(owner)s, %(reason)s, 1, STATEMENT_TIMESTAMP())
ON CONFLICT (job, "window", reason) DO UPDATE
SET count = jobclaims_jobskip.count + 1,
    owner = EXCLUDED.owner,
    skipped_at = EXCLUDED.skipped_at
"""

#: ``SKIP``, committing without waiting for the disk: sent outside any
#: transaction, where ``synchronous_commit`` set for the statement's own
#: transaction lasts for that statement. Thirty instances stepping aside at
#: once do not queue on each other's flushes; a crash of the server can
#: lose the skips of its last moments, never a claim.
SKIP_UNFLUSHED = """
INSERT INTO jobclaims_jobskip (job, "window", owner, reason, count, skipped_at)
SELECT %(job)s, %(window)s, %(owner)s, %(reason)s, 1, STATEMENT_TIMESTAMP()
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed
ON CONFLICT (job, "window", reason) DO UPDATE
SET count = jobclaims_jobskip.count + 1,
    owner = EXCLUDED.owner,
    skipped_at = EXCLUDED.skipped_at
"""

#: A skip counted, in one statement, if a committed row refuses a claim that
#: holds the job, returning its reason; no row if none refuses it. The rule
#: is ``rule.frees`` without ``force`` (tests/test_rule.py holds them
#: together): the window's live or succeeded row, or another window's live
#: holder, the window's own row first.
SKIP_IF_BLOCKED = """
INSERT INTO jobclaims_jobskip (job, "window", owner, reason, count, skipped_at)
SELECT %(job)s, %(window)s, %(owner)s,
       CASE WHEN r."window" <> %(window)s THEN 'overlap'
            WHEN r.status = 'succeeded' THEN 'succeeded'
            ELSE 'held' END,
       1, STATEMENT_TIMESTAMP()
FROM jobclaims_jobrun r, (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed
WHERE ((r.job = %(job)s AND r."window" = %(window)s)
       OR (r.job = %(job)s AND r.holds_job IS NOT NULL))
  AND ((r."window" = %(window)s
        AND ((r.status = 'running' AND r.expires_at > STATEMENT_TIMESTAMP())
             OR r.status = 'succeeded'))
       OR (r."window" <> %(window)s AND r.expires_at > STATEMENT_TIMESTAMP()))
ORDER BY r."window" <> %(window)s
LIMIT 1
ON CONFLICT (job, "window", reason) DO UPDATE
SET count = jobclaims_jobskip.count + 1,
    owner = EXCLUDED.owner,
    skipped_at = EXCLUDED.skipped_at
RETURNING reason
"""

#: ``SKIP_IF_BLOCKED`` for a claim that may overlap: only the window's row.
SKIP_IF_WINDOW_BLOCKED = """
INSERT INTO jobclaims_jobskip (job, "window", owner, reason, count, skipped_at)
SELECT %(job)s, %(window)s, %(owner)s,
       CASE WHEN r.status = 'succeeded' THEN 'succeeded' ELSE 'held' END,
       1, STATEMENT_TIMESTAMP()
FROM jobclaims_jobrun r, (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed
WHERE r.job = %(job)s AND r."window" = %(window)s
  AND ((r.status = 'running' AND r.expires_at > STATEMENT_TIMESTAMP())
       OR r.status = 'succeeded')
ON CONFLICT (job, "window", reason) DO UPDATE
SET count = jobclaims_jobskip.count + 1,
    owner = EXCLUDED.owner,
    skipped_at = EXCLUDED.skipped_at
RETURNING reason
"""

#: The run's outcome, if it still holds its claim.
RELEASE = """
UPDATE jobclaims_jobrun
SET status = %(status)s, error = %(error)s, holds_job = NULL,
    finished_at = STATEMENT_TIMESTAMP()
WHERE id = %(id)s AND token = %(token)s AND status = 'running'
"""

#: deadlock_detected, serialization_failure and lock_not_available: the
#: statement or transaction ended with nothing written; try again.
TRANSIENT = frozenset({"40P01", "40001", "55P03"})
#: admin_shutdown, crash_shutdown and cannot_connect_now; the whole 08 class
#: (connection_exception) is one too.
DISCONNECTS = frozenset({"57P01", "57P02", "57P03"})
#: What ``INSERT_UNLESS_TAKEN`` fails with instead of waiting: lock_not_available.
REFUSED_AT_ONCE = "55P03"


def lease(span: datetime.timedelta) -> object:
    """The ``%(lease)s`` parameter: an interval."""
    return span


def refused_at_once(cause: BaseException | None) -> bool:
    """Whether the driver's error is ``INSERT_UNLESS_TAKEN`` refusing to wait."""
    return sqlstate(cause) == REFUSED_AT_ONCE


def sqlstate(cause: BaseException | None) -> str | None:
    """The error's SQLSTATE: psycopg (3) and psycopg2 name it differently."""
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return None if code is None else str(code)
