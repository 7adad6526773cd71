"""SQLite's claim statements, written whole, and its errors that mean "try again".

SQLite has no INSERT that skips a taken key without waiting: there an
INSERT takes the lock on the whole file even when it inserts nothing, so
the losers of a race would queue for it one by one, where a read lets them
through together. So every claim reads first.

SQLite keeps the text Django writes for a datetime and compares it as
text: every time is SQLite's 'now', one moment throughout a statement,
written as Django writes it (``jobclaims.time.clock.sqlite_stamp``), six digits
of microseconds, none when they are zero. ``%%`` is a percent sign;
``%(name)s`` are the statement's parameters; the names of tables and
columns are the models' own (tests/claims/test_sql.py holds them together).
"""

from __future__ import annotations

import datetime

#: The newest pause in force of the job, of the job a schedule's claim name
#: belongs to, of one of that job's tags (``JobTag``, ``#billing``), or of
#: all jobs (``all_jobs``, a name no job has): not resumed, and its
#: ``until`` (if any) not come. The (job, resumed_at) index finds it, and
#: the tags' unique (job, tag) index the job's tags.
PAUSE = """
SELECT paused_by, paused_at, reason, "until", job
FROM jobclaims_jobpause
WHERE (job IN (%(job)s, %(parent_job)s, %(all_jobs)s)
       OR job IN (SELECT tag FROM jobclaims_jobtag WHERE job = %(parent_job)s))
  AND resumed_at IS NULL
  AND ("until" IS NULL
       OR "until" > REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000', '.000000', ''))
ORDER BY paused_at DESC, id DESC
LIMIT 1
"""

#: The newest pause in force of the job, of the job a schedule's claim name
#: belongs to, or of all jobs, as a subquery's select: the first part of
#: the two reads that refuse a claim of a slot, before it and after it.
_NEWEST_PAUSE = """\
    SELECT 'paused' AS found, paused_by AS who, reason AS said, job AS job_or_status,
           paused_at AS since, "until"
    FROM jobclaims_jobpause
    WHERE (job IN (%(job)s, %(parent_job)s, %(all_jobs)s)
           OR job IN (SELECT tag FROM jobclaims_jobtag WHERE job = %(parent_job)s))
      AND resumed_at IS NULL
      AND ("until" IS NULL
           OR "until" > REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000', '.000000', ''))
    ORDER BY paused_at DESC, id DESC
    LIMIT 1"""

#: What refuses a claim of a slot before any claim row is read, in one read:
#: the newest pause in force of the job (as ``PAUSE``), and the first run of
#: another window covering the slot that is held or has succeeded
#: (``jobclaims.time.slots``). A row each at most, the pause's first.
PAUSE_OR_SLOT_RUN = (
    """
SELECT * FROM (
"""
    + _NEWEST_PAUSE
    + """)
UNION ALL
SELECT * FROM (
    SELECT 'slot-ran', "window", owner, status, expires_at, finished_at
    FROM jobclaims_jobrun
    WHERE job = %(job)s AND slot_end > %(slot_start)s AND slot_start < %(slot_end)s
      AND "window" <> %(window)s
      AND ((status = 'running'
            AND expires_at > REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000',
                                     '.000000', ''))
           OR status = 'succeeded')
    ORDER BY slot_end
    LIMIT 1)
"""
)

#: What refuses a claim once its row is committed, read right after: the
#: newest pause in force of the job (as ``PAUSE``), and the first run of
#: another window covering the claim's slot that has succeeded. Either may
#: have committed after the read before the claim; read after the claim's
#: commit, either is seen if it committed first. A row each at most, the
#: pause's first.
PAUSE_OR_SLOT_SUCCEEDED = (
    """
SELECT * FROM (
"""
    + _NEWEST_PAUSE
    + """)
UNION ALL
SELECT * FROM (
    SELECT 'slot-ran', "window", owner, status, expires_at, finished_at
    FROM jobclaims_jobrun
    WHERE job = %(job)s AND slot_end > %(slot_start)s AND slot_start < %(slot_end)s
      AND "window" <> %(window)s AND status = 'succeeded'
    ORDER BY slot_end
    LIMIT 1)
"""
)

#: The window's first claim after a read found no row in its way;
#: ``IntegrityError`` when a contender inserted first. The lease moves
#: 'now' inside STRFTIME, as a modifier.
INSERT = """
INSERT INTO jobclaims_jobrun
    (job, "window", schedule, owner, token, holds_job, slot_start, slot_end, series,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES (%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
        %(slot_start)s, %(slot_end)s, %(series)s,
        'running', 1, 0, '',
        REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000', '.000000', ''),
        REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %(lease)s) || '000', '.000000', ''))
"""

#: ``INSERT``, returning its key and stamps (SQLite 3.35 and later).
INSERT_RETURNING = INSERT.rstrip() + "\nRETURNING id, claimed_at, expires_at\n"

#: What an older SQLite reads back after ``INSERT``.
READ_BACK = """
SELECT id, claimed_at, expires_at
FROM jobclaims_jobrun
WHERE job = %(job)s AND "window" = %(window)s AND token = %(token)s
"""

#: The rows in the way of a claim of a window that may overlap the job's
#: other runs: the window's own, and whether its lease had ended.
WINDOW_ROWS = """
SELECT "window", status, owner, expires_at, finished_at,
       expires_at <= REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000', '.000000', '')
FROM jobclaims_jobrun
WHERE job = %(job)s AND "window" = %(window)s
"""

#: The rows in the way of a claim that holds the job: the window's own and
#: the job's holder. "IS NOT NULL" is a range the unique index can search,
#: where SQLite writes "= TRUE" as a bare column that it cannot.
WINDOW_AND_HOLDER_ROWS = """
SELECT "window", status, owner, expires_at, finished_at,
       expires_at <= REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000', '.000000', '')
FROM jobclaims_jobrun
WHERE (job = %(job)s AND "window" = %(window)s)
   OR (job = %(job)s AND holds_job IS NOT NULL)
"""

#: One more instance stepped aside: each window's skips for one reason land
#: on one row.
SKIP = """
INSERT INTO jobclaims_jobskip (job, "window", owner, reason, count, skipped_at)
VALUES (%(job)s, %(window)s, %(owner)s, %(reason)s, 1,
        REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000', '.000000', ''))
ON CONFLICT (job, "window", reason) DO UPDATE
SET count = jobclaims_jobskip.count + 1,
    owner = excluded.owner,
    skipped_at = excluded.skipped_at
"""

#: The run's outcome, and what it printed, if it still holds its claim.
RELEASE = """
UPDATE jobclaims_jobrun
SET status = %(status)s, error = %(error)s, output = %(output)s, holds_job = NULL,
    finished_at = REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000', '.000000', '')
WHERE id = %(id)s AND token = %(token)s AND status = 'running'
"""

#: The claims of many fires at one instant, in one statement
#: (``jobclaims.claims.batch``): each row of ``{fires}`` (each written as
#: ``FIRE``) inserted unless its job is paused, a run of another window
#: covering its slot is held or succeeded, or a unique key is taken. One
#: statement takes the write lock once, before its first read, so nothing
#: can commit between its checks and its rows: no read after it is needed.
#: The last parameter is ``all_jobs``.
INSERT_MANY = """
WITH f (job, "window", schedule, owner, token, holds_job, slot_start, slot_end, series,
        lease, parent_job) AS (VALUES {fires})
INSERT INTO jobclaims_jobrun
    (job, "window", schedule, owner, token, holds_job, slot_start, slot_end, series,
     status, attempt, failures, error, claimed_at, expires_at)
SELECT f.job, f."window", f.schedule, f.owner, f.token, f.holds_job,
       f.slot_start, f.slot_end, f.series,
       'running', 1, 0, '',
       REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000', '.000000', ''),
       REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', f.lease) || '000', '.000000', '')
FROM f
WHERE NOT EXISTS (
    SELECT 1 FROM jobclaims_jobpause
    WHERE (job IN (f.job, f.parent_job, %s)
           OR job IN (SELECT tag FROM jobclaims_jobtag WHERE job = f.parent_job))
      AND resumed_at IS NULL
      AND ("until" IS NULL
           OR "until" > REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000',
                                '.000000', '')))
  AND NOT EXISTS (
    SELECT 1 FROM jobclaims_jobrun r
    WHERE r.job = f.job AND r.slot_end > f.slot_start AND r.slot_start < f.slot_end
      AND r."window" <> f."window"
      AND ((r.status = 'running'
            AND r.expires_at > REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000',
                                       '.000000', ''))
           OR r.status = 'succeeded'))
ORDER BY f.job, f."window"
ON CONFLICT DO NOTHING
RETURNING id, job, "window", claimed_at, expires_at
"""

#: One row of ``INSERT_MANY``'s ``{fires}``.
FIRE = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"

#: ``SKIP_IF_BLOCKED`` of PostgreSQL's, for each row of ``{keys}`` (each
#: written as ``BLOCKED``): one skip counted per fire a committed row
#: refuses, its reason returned. The parameter after the rows is the owner.
SKIP_IF_BLOCKED_MANY = """
WITH f (job, "window", holds_job) AS (VALUES {keys})
INSERT INTO jobclaims_jobskip (job, "window", owner, reason, count, skipped_at)
SELECT job, "window", %s, reason, 1,
       REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000', '.000000', '')
FROM (
    SELECT f.job, f."window",
           CASE WHEN r."window" <> f."window" THEN 'overlap'
                WHEN r.status = 'succeeded' THEN 'succeeded'
                ELSE 'held' END AS reason,
           ROW_NUMBER() OVER (PARTITION BY f.job, f."window"
                              ORDER BY r."window" <> f."window") AS nth
    FROM f JOIN jobclaims_jobrun r
      ON r.job = f.job
     AND (r."window" = f."window" OR (f.holds_job AND r.holds_job IS NOT NULL))
    WHERE (r."window" = f."window"
           AND ((r.status IN ('running', 'cancelled')
                 AND r.expires_at > REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000',
                                            '.000000', ''))
                OR r.status = 'succeeded'))
       OR (r."window" <> f."window"
           AND r.expires_at > REPLACE(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW') || '000',
                                      '.000000', ''))
) AS blocked
WHERE nth = 1
ORDER BY job, "window"
ON CONFLICT (job, "window", reason) DO UPDATE
SET count = jobclaims_jobskip.count + 1,
    owner = excluded.owner,
    skipped_at = excluded.skipped_at
RETURNING job, "window", reason
"""

#: One row of ``SKIP_IF_BLOCKED_MANY``'s ``{keys}``.
BLOCKED = "(%s, %s, %s)"

#: SQLITE_BUSY and SQLITE_LOCKED (named in sqlite3 from Python 3.11): another
#: connection holds the lock the statement needs; try again.
BUSY, LOCKED = 5, 6


def lease(span: datetime.timedelta) -> object:
    """The ``%(lease)s`` parameter: a STRFTIME modifier."""
    return f"+{span.total_seconds():.6f} seconds"
