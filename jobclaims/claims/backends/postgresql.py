"""PostgreSQL's claim statements, written whole, and its errors that mean "try again".

Every time is ``STATEMENT_TIMESTAMP()``: the database's clock, one moment
throughout a statement. ``%(name)s`` are the statement's parameters; the
names of tables and columns are the models' own (tests/claims/test_sql.py holds
them together).
"""

from __future__ import annotations

import datetime

#: A claim of a window nobody holds, in one statement that never waits:
#: the function ``jobclaims_claim()`` (migration 0002), which keeps its
#: plan for the session. It inserts nothing where the job is paused (a
#: pause not resumed whose ``until`` has not come), where a run of another
#: window covering the claim's slot is held or succeeded (as
#: ``PAUSE_OR_SLOT_RUN``; no slot, none), or where a unique key is taken (a
#: row holds the window or the job, or the fire under another name of its
#: schedule), and fails at once, rather than wait, where another
#: transaction is writing that key: its lock timeout, 1 ms, is set for this
#: statement's own transaction. A pause of the job a schedule's claim name
#: belongs to holds for it too (``jobclaims.claims.naming``), and so does a
#: pause of all jobs.
CLAIM = """
SELECT id, claimed_at, expires_at
FROM jobclaims_claim(%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
                     %(slot_start)s, %(slot_end)s, %(series)s, %(lease)s,
                     %(parent_job)s, %(all_jobs)s)
"""

#: The newest pause in force of the job, of the job a schedule's claim name
#: belongs to, of one of that job's tags (``JobTag``, ``#billing``), or of
#: all jobs (``all_jobs``, a name no job has): not resumed, and its
#: ``until`` (if any) not come, as the ``FROM`` of a read that selects its
#: columns. The (job, resumed_at) index finds it, and the tags' unique (job,
#: tag) index the job's tags.
_PAUSE_IN_FORCE = """
FROM jobclaims_jobpause
WHERE (job IN (%(job)s, %(parent_job)s, %(all_jobs)s)
       OR job IN (SELECT tag FROM jobclaims_jobtag WHERE job = %(parent_job)s))
  AND resumed_at IS NULL
  AND ("until" IS NULL OR "until" > STATEMENT_TIMESTAMP())
ORDER BY paused_at DESC, id DESC
LIMIT 1
"""

#: The newest pause in force (``_PAUSE_IN_FORCE``), as the claim reads it.
PAUSE = 'SELECT paused_by, paused_at, reason, "until", job' + _PAUSE_IN_FORCE

#: The newest pause in force, in the columns of a slot's run (below), so
#: that one union reads both: the first part of the two reads that refuse a
#: claim of a slot, before it and after it.
_NEWEST_PAUSE = (
    "SELECT 'paused' AS found, paused_by AS who, reason AS said, job AS job_or_status,"
    ' paused_at AS since, "until"' + _PAUSE_IN_FORCE
)

#: What refuses a claim of a slot before any claim row is read, in one read:
#: the newest pause in force of the job (as ``PAUSE``), and the first run of
#: another window covering the slot that is held or has succeeded
#: (``jobclaims.time.slots``). A row each at most, the pause's first.
PAUSE_OR_SLOT_RUN = (
    """
SELECT * FROM (
"""
    + _NEWEST_PAUSE
    + """) AS pause
UNION ALL
SELECT * FROM (
    SELECT 'slot-ran', "window", owner, status, expires_at, finished_at
    FROM jobclaims_jobrun
    WHERE job = %(job)s AND slot_end > %(slot_start)s AND slot_start < %(slot_end)s
      AND "window" <> %(window)s
      AND ((status = 'running' AND expires_at > STATEMENT_TIMESTAMP()) OR status = 'succeeded')
    ORDER BY slot_end
    LIMIT 1) AS slot_run
"""
)

#: What refuses a claim once its row is committed, read right after: the
#: newest pause in force of the job (as ``PAUSE``), and the first run of
#: another window covering the claim's slot that has succeeded. Each may
#: have committed while the claim was being taken, which no check in the
#: INSERT could see; read after the claim's commit, either is seen if it
#: committed first. A row each at most, the pause's first.
PAUSE_OR_SLOT_SUCCEEDED = (
    """
SELECT * FROM (
"""
    + _NEWEST_PAUSE
    + """) AS pause
UNION ALL
SELECT * FROM (
    SELECT 'slot-ran', "window", owner, status, expires_at, finished_at
    FROM jobclaims_jobrun
    WHERE job = %(job)s AND slot_end > %(slot_start)s AND slot_start < %(slot_end)s
      AND "window" <> %(window)s AND status = 'succeeded'
    ORDER BY slot_end
    LIMIT 1) AS slot_run
"""
)

#: ``CLAIM``, committed, then the read that refuses a claim once it
#: committed, in one statement: the procedure
#: ``jobclaims_claim_then_read()`` (migration 0003), which commits the
#: claim inside, so that its read takes its snapshot after the claim
#: committed and sees any pause (or success of the slot) that committed
#: first, as a read of its own would, without a round trip more. Its one
#: row is the claim's (``CLAIM``'s columns, NULL where nothing was inserted)
#: then the refusal in ``PAUSE_OR_SLOT_SUCCEEDED``'s columns (NULL: none).
#: ``CLAIM_THEN_PAUSE`` reads the pauses alone, for a claim without a slot
#: or forced; ``CLAIM_THEN_PAUSE_OR_SLOT_SUCCEEDED`` the slot's success too.
_CLAIM_THEN_READ = """
CALL jobclaims_claim_then_read(%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s,
                               %(holds_job)s, %(slot_start)s, %(slot_end)s, %(series)s,
                               %(lease)s, %(parent_job)s, %(all_jobs)s, {read_slot})
"""
CLAIM_THEN_PAUSE = _CLAIM_THEN_READ.format(read_slot="FALSE")
CLAIM_THEN_PAUSE_OR_SLOT_SUCCEEDED = _CLAIM_THEN_READ.format(read_slot="TRUE")

#: The window's first claim after a read found no row in its way;
#: ``IntegrityError`` when a contender inserted first.
INSERT = """
INSERT INTO jobclaims_jobrun
    (job, "window", schedule, owner, token, holds_job, slot_start, slot_end, series,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES (%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
        %(slot_start)s, %(slot_end)s, %(series)s,
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
#: is ``rule.frees`` without ``force`` (tests/claims/test_rule.py holds them
#: together): the window's live or succeeded row (a cancelled one is live
#: until its lease ends), or another window's live holder, the window's own
#: row first.
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
        AND ((r.status IN ('running', 'cancelled') AND r.expires_at > STATEMENT_TIMESTAMP())
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
  AND ((r.status IN ('running', 'cancelled') AND r.expires_at > STATEMENT_TIMESTAMP())
       OR r.status = 'succeeded')
ON CONFLICT (job, "window", reason) DO UPDATE
SET count = jobclaims_jobskip.count + 1,
    owner = EXCLUDED.owner,
    skipped_at = EXCLUDED.skipped_at
RETURNING reason
"""

#: The run's outcome, and what it printed, if it still holds its claim,
#: returning the finish time the database's clock gave it (for the run's
#: duration), in UTC without a zone, as the claim's procedure returns its
#: times (migration 0003): psycopg loads that in C.
RELEASE = """
UPDATE jobclaims_jobrun
SET status = %(status)s, error = %(error)s, output = %(output)s, holds_job = NULL,
    finished_at = STATEMENT_TIMESTAMP()
WHERE id = %(id)s AND token = %(token)s AND status = 'running'
RETURNING finished_at AT TIME ZONE 'UTC'
"""

#: The claims of many fires at one instant, in one statement
#: (``jobclaims.claims.batch``): ``CLAIM`` for each row of
#: ``{fires}`` (each written as ``FIRE``), in the order of their keys. It
#: waits for a key another transaction is writing, as a loser must wait to
#: learn who won, up to the lock timeout (``%s``, first after the rows); the
#: one order every host inserts in lets the waits form a queue, not a cycle.
#: The last parameter is ``all_jobs``.
INSERT_MANY = """
WITH f (job, "window", schedule, owner, token, holds_job, slot_start, slot_end, series,
        lease, parent_job) AS (VALUES {fires})
INSERT INTO jobclaims_jobrun
    (job, "window", schedule, owner, token, holds_job, slot_start, slot_end, series,
     status, attempt, failures, error, claimed_at, expires_at)
SELECT f.job, f."window", f.schedule, f.owner, f.token, f.holds_job,
       f.slot_start, f.slot_end, f.series,
       'running', 1, 0, '', STATEMENT_TIMESTAMP(), STATEMENT_TIMESTAMP() + f.lease
FROM f, (SELECT set_config('lock_timeout', %s, true)) AS bounded_wait
WHERE NOT EXISTS (
    SELECT FROM jobclaims_jobpause
    WHERE (job IN (f.job, f.parent_job, %s)
           OR job IN (SELECT tag FROM jobclaims_jobtag WHERE job = f.parent_job))
      AND resumed_at IS NULL
      AND ("until" IS NULL OR "until" > STATEMENT_TIMESTAMP()))
  AND NOT EXISTS (
    SELECT FROM jobclaims_jobrun r
    WHERE r.job = f.job AND r.slot_end > f.slot_start AND r.slot_start < f.slot_end
      AND r."window" <> f."window"
      AND ((r.status = 'running' AND r.expires_at > STATEMENT_TIMESTAMP())
           OR r.status = 'succeeded'))
ORDER BY f.job, f."window"
ON CONFLICT DO NOTHING
RETURNING id, job, "window", claimed_at, expires_at
"""

#: One row of ``INSERT_MANY``'s ``{fires}``, typed: a column of NULLs alone
#: would be text.
FIRE = (
    "(%s, %s, %s, %s, %s::uuid, %s::boolean, %s::timestamptz, %s::timestamptz, %s,"
    " %s::interval, %s)"
)

#: Of the claims ``{keys}`` names (each written as ``KEY``), those that a
#: pause of their job or a success of their slot refuses, read once they
#: committed, as ``PAUSE_OR_SLOT_SUCCEEDED`` reads for one. The last
#: parameter is ``all_jobs``.
REFUSED_MANY = """
WITH f (job, "window", slot_start, slot_end, parent_job) AS (VALUES {keys})
SELECT f.job, f."window"
FROM f
WHERE EXISTS (
    SELECT FROM jobclaims_jobpause
    WHERE (job IN (f.job, f.parent_job, %s)
           OR job IN (SELECT tag FROM jobclaims_jobtag WHERE job = f.parent_job))
      AND resumed_at IS NULL
      AND ("until" IS NULL OR "until" > STATEMENT_TIMESTAMP()))
   OR EXISTS (
    SELECT FROM jobclaims_jobrun r
    WHERE r.job = f.job AND r.slot_end > f.slot_start AND r.slot_start < f.slot_end
      AND r."window" <> f."window" AND r.status = 'succeeded')
"""

#: One row of ``REFUSED_MANY``'s ``{keys}``.
KEY = "(%s, %s, %s::timestamptz, %s::timestamptz, %s)"

#: ``INSERT_MANY``, committed, then ``REFUSED_MANY``, in one message of
#: PostgreSQL's simple query protocol: the COMMIT ends the claims' own
#: transaction, so the read after it takes its snapshot after they
#: committed. An error in the claims rolls them back and skips the rest.
CLAIM_MANY_THEN_REFUSED = INSERT_MANY.rstrip() + ";\nCOMMIT;\n" + REFUSED_MANY.lstrip()

#: ``SKIP_IF_BLOCKED`` for each row of ``{keys}`` (each written as
#: ``BLOCKED``): one skip counted per fire a committed row refuses, its
#: reason returned; nothing for a fire none refuses. The parameter after
#: the rows is the owner.
SKIP_IF_BLOCKED_MANY = """
WITH f (job, "window", holds_job) AS (VALUES {keys})
INSERT INTO jobclaims_jobskip (job, "window", owner, reason, count, skipped_at)
SELECT job, "window", %s, reason, 1, STATEMENT_TIMESTAMP()
FROM (
    SELECT f.job, f."window",
           CASE WHEN r."window" <> f."window" THEN 'overlap'
                WHEN r.status = 'succeeded' THEN 'succeeded'
                ELSE 'held' END AS reason,
           ROW_NUMBER() OVER (PARTITION BY f.job, f."window"
                              ORDER BY r."window" <> f."window") AS nth
    FROM f JOIN jobclaims_jobrun r
      ON r.job = f.job AND (r."window" = f."window" OR (f.holds_job AND r.holds_job IS NOT NULL))
    WHERE (r."window" = f."window"
           AND ((r.status IN ('running', 'cancelled') AND r.expires_at > STATEMENT_TIMESTAMP())
                OR r.status = 'succeeded'))
       OR (r."window" <> f."window" AND r.expires_at > STATEMENT_TIMESTAMP())
) AS blocked, (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed
WHERE nth = 1
ORDER BY job, "window"
ON CONFLICT (job, "window", reason) DO UPDATE
SET count = jobclaims_jobskip.count + 1,
    owner = EXCLUDED.owner,
    skipped_at = EXCLUDED.skipped_at
RETURNING job, "window", reason
"""

#: One row of ``SKIP_IF_BLOCKED_MANY``'s ``{keys}``.
BLOCKED = "(%s, %s, %s::boolean)"

#: deadlock_detected, serialization_failure and lock_not_available: the
#: statement or transaction ended with nothing written; try again.
TRANSIENT = frozenset({"40P01", "40001", "55P03"})
#: admin_shutdown, crash_shutdown and cannot_connect_now; the whole 08 class
#: (connection_exception) is one too.
DISCONNECTS = frozenset({"57P01", "57P02", "57P03"})
#: What ``CLAIM`` fails with instead of waiting: lock_not_available.
REFUSED_AT_ONCE = "55P03"


def lease(span: datetime.timedelta) -> object:
    """The ``%(lease)s`` parameter: an interval."""
    return span


def refused_at_once(cause: BaseException | None) -> bool:
    """Whether the driver's error is ``CLAIM`` refusing to wait."""
    return sqlstate(cause) == REFUSED_AT_ONCE


def sqlstate(cause: BaseException | None) -> str | None:
    """The error's SQLSTATE: psycopg (3) and psycopg2 name it differently."""
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return None if code is None else str(code)
