"""MariaDB's and MySQL's claim statements, written whole, and their errors
that mean "try again"; on a Galera node, the settings that make claims exact.

Every time is ``UTC_TIMESTAMP(6)``: Django stores UTC, and
``CURRENT_TIMESTAMP`` is the session's local time. ``%(name)s`` are the
statement's parameters; the names of tables and columns are the models'
own (tests/claims/test_sql.py holds them together).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from django.db import DatabaseError

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

#: A claim of a window nobody holds, in one statement that never waits:
#: ``INSERT IGNORE`` inserts nothing where a unique key is taken, and the
#: lock wait of 0 fails it at once where another transaction is writing that
#: key. It does not ask for a pause, as PostgreSQL's does: only
#: ``INSERT ... SELECT`` could, and InnoDB holds the table's AUTO-INC lock
#: for the whole of one (``innodb_autoinc_lock_mode`` 1, the default),
#: which makes every claim of every job wait for it, and fail at once
#: (1467) under the lock wait of 0. The claim reads the pauses first.
#: MariaDB's per-statement setting; MySQL, which lacks it, also lacks
#: ``INSERT ... RETURNING``, so it never sends this.
INSERT_UNLESS_TAKEN = """
SET STATEMENT innodb_lock_wait_timeout = 0 FOR INSERT IGNORE INTO jobclaims_jobrun
    (job, `window`, schedule, owner, token, holds_job, slot_start, slot_end, series,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES (%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
        %(slot_start)s, %(slot_end)s, %(series)s,
        'running', 1, 0, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL %(lease)s MICROSECOND)
RETURNING id, claimed_at, expires_at
"""

#: ``INSERT_UNLESS_TAKEN`` on a Galera node: without the server's retry of an
#: autocommitted statement that lost certification (see ``GALERA_NO_RETRY``).
INSERT_UNLESS_TAKEN_ON_GALERA = """
SET STATEMENT innodb_lock_wait_timeout = 0, wsrep_retry_autocommit = 0 FOR INSERT IGNORE
INTO jobclaims_jobrun
    (job, `window`, schedule, owner, token, holds_job, slot_start, slot_end, series,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES (%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
        %(slot_start)s, %(slot_end)s, %(series)s,
        'running', 1, 0, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL %(lease)s MICROSECOND)
RETURNING id, claimed_at, expires_at
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
  AND (`until` IS NULL OR `until` > UTC_TIMESTAMP(6))
ORDER BY paused_at DESC, id DESC
LIMIT 1
"""

#: The newest pause in force (``_PAUSE_IN_FORCE``), as the claim reads it.
PAUSE = "SELECT paused_by, paused_at, reason, `until`, job" + _PAUSE_IN_FORCE

#: The newest pause in force, in the columns of a slot's run (below), so
#: that one union reads both: the first part of the two reads that refuse a
#: claim of a slot, before it and after it.
_NEWEST_PAUSE = (
    "SELECT 'paused' AS found, paused_by AS who, reason AS said, job AS job_or_status,"
    " paused_at AS since, `until`" + _PAUSE_IN_FORCE
)

#: The first run of another window covering the claim's slot that is held
#: or has succeeded (``jobclaims.time.slots``). The (job, slot_end) index finds it.
_SLOT_RUN = """
SELECT 'slot-ran', `window`, owner, status, expires_at, finished_at
FROM jobclaims_jobrun
WHERE job = %(job)s AND slot_end > %(slot_start)s AND slot_start < %(slot_end)s
  AND `window` <> %(window)s
  AND ((status = 'running' AND expires_at > UTC_TIMESTAMP(6)) OR status = 'succeeded')
ORDER BY slot_end
LIMIT 1
"""

#: ``_SLOT_RUN``, of the runs that have succeeded alone.
_SLOT_SUCCEEDED = """
SELECT 'slot-ran', `window`, owner, status, expires_at, finished_at
FROM jobclaims_jobrun
WHERE job = %(job)s AND slot_end > %(slot_start)s AND slot_start < %(slot_end)s
  AND `window` <> %(window)s AND status = 'succeeded'
ORDER BY slot_end
LIMIT 1
"""


def _union(*selects: str) -> str:
    """One read of the rows of ``selects``, each in parentheses: MariaDB
    takes a member's own ORDER BY and LIMIT so, where a member written as a
    derived table (``SELECT * FROM (...) AS t``) is first written out to a
    temporary table, which made the read cost nearly twice as much."""
    return "\nUNION ALL\n".join(f"({select.strip()})" for select in selects)


#: What refuses a claim of a slot before any claim row is read, in one read:
#: the newest pause in force of the job (as ``PAUSE``), and the first run of
#: another window covering the slot that is held or has succeeded. A row
#: each at most, the pause's first.
PAUSE_OR_SLOT_RUN = _union(_NEWEST_PAUSE, _SLOT_RUN)

#: What refuses a claim once its row is committed, read right after: the
#: newest pause in force of the job (as ``PAUSE``), and the first run of
#: another window covering the claim's slot that has succeeded. Either may
#: have committed after the read before the claim; read after the claim's
#: commit, either is seen if it committed first. A row each at most, the
#: pause's first.
PAUSE_OR_SLOT_SUCCEEDED = _union(_NEWEST_PAUSE, _SLOT_SUCCEEDED)

#: The read of what refuses a claim before it (``PAUSE_OR_SLOT_RUN``),
#: ``INSERT_UNLESS_TAKEN``, committed, and the read that refuses a claim
#: after its commit, in one call: the procedure
#: ``jobclaims_claim_then_read()`` (migration 0004), which inserts with
#: ``VALUES`` once its read found nothing, so no AUTO-INC lock is held
#: across the read. Its one row is the claim's (``INSERT_UNLESS_TAKEN``'s
#: columns, the id NULL where nothing was inserted), then what refuses the
#: claim, before or after, in ``PAUSE_OR_SLOT_RUN``'s columns (NULL: none).
#: ``CLAIM_THEN_PAUSE`` reads the pauses alone after the commit, for a
#: claim without a slot or forced; ``CLAIM_THEN_PAUSE_OR_SLOT_SUCCEEDED``
#: the slot's success too. MariaDB 10.5 and later, not on Galera, whose
#: node may retry an INSERT after answering.
_CLAIM_THEN_READ = """
CALL jobclaims_claim_then_read(%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s,
                               %(holds_job)s, %(slot_start)s, %(slot_end)s, %(series)s,
                               %(lease)s, %(parent_job)s, %(all_jobs)s, {read_slot})
"""
CLAIM_THEN_PAUSE = _CLAIM_THEN_READ.format(read_slot="FALSE")
CLAIM_THEN_PAUSE_OR_SLOT_SUCCEEDED = _CLAIM_THEN_READ.format(read_slot="TRUE")

#: The window's first claim after a read found no row in its way;
#: ``IntegrityError`` when a contender inserted first. MySQL, which cannot
#: return rows from an INSERT, reads its key and stamps back (``READ_BACK``).
INSERT = """
INSERT INTO jobclaims_jobrun
    (job, `window`, schedule, owner, token, holds_job, slot_start, slot_end, series,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES (%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
        %(slot_start)s, %(slot_end)s, %(series)s,
        'running', 1, 0, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL %(lease)s MICROSECOND)
"""

INSERT_RETURNING = INSERT.rstrip() + "\nRETURNING id, claimed_at, expires_at\n"

READ_BACK = """
SELECT id, claimed_at, expires_at
FROM jobclaims_jobrun
WHERE job = %(job)s AND `window` = %(window)s AND token = %(token)s
"""

#: The rows in the way of a claim of a window that may overlap the job's
#: other runs: the window's own, and whether its lease had ended.
WINDOW_ROWS = """
SELECT `window`, status, owner, expires_at, finished_at,
       expires_at <= UTC_TIMESTAMP(6) AS lapsed
FROM jobclaims_jobrun
WHERE job = %(job)s AND `window` = %(window)s
"""

#: The rows in the way of a claim that holds the job: the window's own and
#: the job's holder. Each side of the OR is a lookup on one unique index.
WINDOW_AND_HOLDER_ROWS = """
SELECT `window`, status, owner, expires_at, finished_at,
       expires_at <= UTC_TIMESTAMP(6) AS lapsed
FROM jobclaims_jobrun
WHERE (job = %(job)s AND `window` = %(window)s)
   OR (job = %(job)s AND holds_job IS NOT NULL)
"""

#: One more instance stepped aside: each window's skips for one reason land
#: on one row. Waits only for another skip's statement on that row.
SKIP = """
INSERT INTO jobclaims_jobskip (job, `window`, owner, reason, count, skipped_at)
VALUES (%(job)s, %(window)s, %(owner)s, %(reason)s, 1, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    count = count + 1, owner = VALUES(owner), skipped_at = VALUES(skipped_at)
"""

#: A skip counted, in one statement, if a committed row refuses a claim that
#: holds the job, returning its reason; no row if none refuses it. The rule
#: is ``rule.frees`` without ``force`` (tests/claims/test_rule.py holds them
#: together): the window's live or succeeded row (a cancelled one is live
#: until its lease ends), or another window's live holder, the window's own
#: row first. MariaDB 10.5 and later, not on Galera, whose node orders an
#: INSERT's read after the cluster's writes only when told for INSERTs too.
SKIP_IF_BLOCKED = """
INSERT INTO jobclaims_jobskip (job, `window`, owner, reason, count, skipped_at)
SELECT %(job)s, %(window)s, %(owner)s,
       CASE WHEN r.`window` <> %(window)s THEN 'overlap'
            WHEN r.status = 'succeeded' THEN 'succeeded'
            ELSE 'held' END,
       1, UTC_TIMESTAMP(6)
FROM jobclaims_jobrun r
WHERE ((r.job = %(job)s AND r.`window` = %(window)s)
       OR (r.job = %(job)s AND r.holds_job IS NOT NULL))
  AND ((r.`window` = %(window)s
        AND ((r.status IN ('running', 'cancelled') AND r.expires_at > UTC_TIMESTAMP(6))
             OR r.status = 'succeeded'))
       OR (r.`window` <> %(window)s AND r.expires_at > UTC_TIMESTAMP(6)))
ORDER BY r.`window` <> %(window)s
LIMIT 1
ON DUPLICATE KEY UPDATE
    count = count + 1, owner = VALUES(owner), skipped_at = VALUES(skipped_at)
RETURNING reason
"""

#: ``SKIP_IF_BLOCKED`` for a claim that may overlap: only the window's row.
SKIP_IF_WINDOW_BLOCKED = """
INSERT INTO jobclaims_jobskip (job, `window`, owner, reason, count, skipped_at)
SELECT %(job)s, %(window)s, %(owner)s,
       CASE WHEN r.status = 'succeeded' THEN 'succeeded' ELSE 'held' END,
       1, UTC_TIMESTAMP(6)
FROM jobclaims_jobrun r
WHERE r.job = %(job)s AND r.`window` = %(window)s
  AND ((r.status IN ('running', 'cancelled') AND r.expires_at > UTC_TIMESTAMP(6))
       OR r.status = 'succeeded')
LIMIT 1
ON DUPLICATE KEY UPDATE
    count = count + 1, owner = VALUES(owner), skipped_at = VALUES(skipped_at)
RETURNING reason
"""

#: The claims of many fires at one instant, in one statement
#: (``jobclaims.claims.batch``): ``{fires}`` is its rows, each written as
#: ``FIRE``, in the order of their keys. ``INSERT IGNORE`` inserts nothing
#: where a unique key is taken; a key another transaction is writing is
#: waited for up to a second, as a loser must wait to learn who won, and the
#: one order every host inserts in lets the waits form a queue, not a cycle.
#: Rows of values, not ``INSERT ... SELECT``: InnoDB would hold the table's
#: AUTO-INC lock through the whole of that (see ``INSERT_UNLESS_TAKEN``).
#: The claims read what refuses them first (``REFUSED_MANY``, ``held``).
INSERT_MANY = """
SET STATEMENT innodb_lock_wait_timeout = 1 FOR INSERT IGNORE INTO jobclaims_jobrun
    (job, `window`, schedule, owner, token, holds_job, slot_start, slot_end, series,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES {fires}
RETURNING id, job, `window`, claimed_at, expires_at
"""

#: One row of ``INSERT_MANY``.
FIRE = (
    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, 'running', 1, 0, '',"
    " UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND)"
)

#: Of the claims ``{keys}`` names (each written as ``KEY``), those that a
#: pause of their job or a run of another window covering their slot
#: refuses: a run held or succeeded (``{held}`` is ``HELD``) before the
#: claims, as ``PAUSE_OR_SLOT_RUN`` reads for one; succeeded (``{held}``
#: empty) once they committed, as ``PAUSE_OR_SLOT_SUCCEEDED``. The last
#: parameter is ``all_jobs``.
REFUSED_MANY = """
WITH f (job, `window`, slot_start, slot_end, parent_job) AS (VALUES {keys})
SELECT f.job, f.`window`
FROM f
WHERE EXISTS (
    SELECT 1 FROM jobclaims_jobpause
    WHERE (job IN (f.job, f.parent_job, %s)
           OR job IN (SELECT tag FROM jobclaims_jobtag WHERE job = f.parent_job))
      AND resumed_at IS NULL
      AND (`until` IS NULL OR `until` > UTC_TIMESTAMP(6)))
   OR EXISTS (
    SELECT 1 FROM jobclaims_jobrun r
    WHERE r.job = f.job AND r.slot_end > f.slot_start AND r.slot_start < f.slot_end
      AND r.`window` <> f.`window`
      AND (r.status = 'succeeded'{held}))
"""

#: ``REFUSED_MANY``'s ``{held}`` before the claims.
HELD = " OR (r.status = 'running' AND r.expires_at > UTC_TIMESTAMP(6))"

#: One row of ``REFUSED_MANY``'s ``{keys}``.
KEY = "(%s, %s, %s, %s, %s)"

#: ``SKIP_IF_BLOCKED`` for each row of ``{keys}`` (each written as
#: ``BLOCKED``): one skip counted per fire a committed row refuses, its
#: reason returned. The parameter after the rows is the owner. ``{token}``
#: and ``{theirs}`` are empty, or ``TOKEN`` and ``THEIRS``.
SKIP_IF_BLOCKED_MANY = """
INSERT INTO jobclaims_jobskip (job, `window`, owner, reason, count, skipped_at)
WITH f (job, `window`, holds_job{token}) AS (VALUES {keys})
SELECT job, `window`, %s, reason, 1, UTC_TIMESTAMP(6)
FROM (
    SELECT f.job, f.`window`,
           CASE WHEN r.`window` <> f.`window` THEN 'overlap'
                WHEN r.status = 'succeeded' THEN 'succeeded'
                ELSE 'held' END AS reason,
           ROW_NUMBER() OVER (PARTITION BY f.job, f.`window`
                              ORDER BY r.`window` <> f.`window`) AS nth
    FROM f JOIN jobclaims_jobrun r
      ON r.job = f.job
     AND (r.`window` = f.`window` OR (f.holds_job AND r.holds_job IS NOT NULL)){theirs}
    WHERE (r.`window` = f.`window`
           AND ((r.status IN ('running', 'cancelled') AND r.expires_at > UTC_TIMESTAMP(6))
                OR r.status = 'succeeded'))
       OR (r.`window` <> f.`window` AND r.expires_at > UTC_TIMESTAMP(6))
) AS blocked
WHERE nth = 1
ORDER BY job, `window`
ON DUPLICATE KEY UPDATE
    count = count + 1, owner = VALUES(owner), skipped_at = VALUES(skipped_at)
RETURNING job, `window`, reason
"""

#: One row of ``SKIP_IF_BLOCKED_MANY``'s ``{keys}``.
BLOCKED = "(%s, %s, %s)"

#: ``SKIP_IF_BLOCKED_MANY``'s ``{token}`` and ``{theirs}`` after the
#: claims' own insert: each fire's token, whose row refuses no fire.
TOKEN = ", token"
THEIRS = " AND r.token <> f.token"

#: One row of ``SKIP_IF_BLOCKED_MANY``'s ``{keys}`` with ``TOKEN``.
BLOCKED_TOKEN = "(%s, %s, %s, %s)"

#: ``INSERT_MANY``, then ``SKIP_IF_BLOCKED_MANY`` for the same fires, its
#: ``{keys}`` as ``{blocked}``, with ``TOKEN`` and ``THEIRS``, then
#: ``REFUSED_MANY`` without ``HELD``: one message, each statement
#: committing as it ends. A fire the insert lost gets its skip counted,
#: and one it won its read after the commit, without a round trip of
#: their own.
CLAIM_MANY_THEN_SKIPPED = ";\n".join(
    (
        INSERT_MANY.strip(),
        SKIP_IF_BLOCKED_MANY.strip()
        .replace("{keys}", "{blocked}")
        .replace("{token}", TOKEN)
        .replace("{theirs}", THEIRS),
        REFUSED_MANY.strip().replace("{held}", ""),
    )
)

#: The run's outcome, and what it printed, if it still holds its claim. On Galera the server may
#: retry it when another node's write to the row wins certification; that
#: is right here: it returns no rows, so the client is told only the
#: retry's row count, and the retry finds the row taken over.
#:
#: An UPDATE cannot return rows here (MariaDB has no UPDATE ... RETURNING),
#: but the answer to every statement carries an insert id, and
#: ``LAST_INSERT_ID(x)`` sets it to x: the finish time, in microseconds
#: since 1970, comes back with the row count (``finished_at()``), where a
#: read after the release cost a round trip for the run's duration.
#: ``UTC_TIMESTAMP(6)`` is one moment throughout the statement.
RELEASE = """
UPDATE jobclaims_jobrun
SET status = %(status)s, error = %(error)s, output = %(output)s, holds_job = NULL,
    finished_at = UTC_TIMESTAMP(6) + INTERVAL 0 * LAST_INSERT_ID(
        TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))) MICROSECOND
WHERE id = %(id)s AND token = %(token)s AND status = 'running'
"""

# Galera: MariaDB whose nodes all take writes, and settle conflicts between
# them when a transaction commits (certification), not with row locks, which
# are local to a node. Two of its defaults break a claim; each statement that
# needs another value sets it for itself, so nothing outlives the statement,
# and nothing of this is sent to a server that does not run Galera.

#: Galera retries an autocommitted statement that lost certification, once
#: by default, after the rows its RETURNING produced were already sent: the
#: client would read a row the retry did not insert. Without the retry the
#: statement fails with error 1213 instead, and nothing is sent.
GALERA_NO_RETRY = "SET STATEMENT wsrep_retry_autocommit = 0 FOR "

#: A node applies what the others committed a moment later; a read that
#: decides whether to skip or take over first waits until this node has
#: applied everything committed cluster-wide before it started (1: reads).
GALERA_CAUSAL = "SET STATEMENT wsrep_sync_wait = 1 FOR "

#: ER_LOCK_DEADLOCK (also a Galera certification conflict), ER_LOCK_WAIT_TIMEOUT
#: (also a Galera node that cannot catch up for a causal read), and
#: ER_UNKNOWN_COM_ERROR, which a Galera node outside the cluster's primary
#: component answers to everything ("WSREP has not yet prepared node for
#: application use") until it rejoins, often within seconds.
TRANSIENT = frozenset({1213, 1205, 1047})
#: The client's errors for a server that cannot be reached
#: (CR_CONNECTION_ERROR 2002, CR_CONN_HOST_ERROR 2003) or went away
#: (CR_SERVER_GONE_ERROR 2006, CR_SERVER_LOST 2013), and the server errors of
#: a Galera node outside the primary component (1047, and
#: ER_ERROR_DURING_COMMIT 1180, which it answers a COMMIT with).
DISCONNECTS = frozenset({2002, 2003, 2006, 2013, 1047, 1180})
#: ER_UNKNOWN_SYSTEM_VARIABLE: ``on_galera()``'s answer from a server without Galera.
UNKNOWN_SYSTEM_VARIABLE = 1193

_MICROSECOND = datetime.timedelta(microseconds=1)


def lease(span: datetime.timedelta) -> object:
    """The ``%(lease)s`` parameter: whole microseconds."""
    return span // _MICROSECOND


def refused_at_once(cause: BaseException | None, galera: bool) -> bool:
    """Whether the driver's error is ``INSERT_UNLESS_TAKEN`` refusing to wait:
    ER_LOCK_WAIT_TIMEOUT; or, on Galera, a write another node's beat in
    certification, reported as a deadlock (1213): nothing was written, and
    a causal read finds the winner's row."""
    code = cause.args[:1] if cause is not None else ()
    return code == (1205,) or (galera and code == (1213,))


def on_galera(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection``'s server is a node of a Galera cluster.

    Asked of the server, once per process and database (the statements are
    chosen once), so a user has nothing to set, and a single server gets
    the statements it always got. Only MariaDB has the per-statement
    settings that make Galera's claims exact.
    """
    if not getattr(connection, "mysql_is_mariadb", False):
        return False
    with connection.cursor() as cursor:
        # One round trip; SHOW VARIABLES, which no server refuses, scans them all.
        try:
            cursor.execute("SELECT @@GLOBAL.wsrep_on")
        except DatabaseError as error:
            cause = error.__cause__
            if cause is not None and cause.args[:1] == (UNKNOWN_SYSTEM_VARIABLE,):
                return False  # A MariaDB built without Galera.
            raise  # A lost connection says nothing about the server.
        (on,) = cursor.fetchone()
    return bool(on)


def finished_at(insert_id: int) -> datetime.datetime:
    """The finish time ``RELEASE`` gave the run, from the statement's insert id."""
    return EPOCH + datetime.timedelta(microseconds=insert_id)


#: Where ``RELEASE``'s microseconds count from.
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def sends_several(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection`` may send several statements in one message:
    mysqlclient allows it unless the database's ``OPTIONS`` say
    a false ``"multi_statements"``, when the claims send one at a time."""
    return bool(connection.settings_dict["OPTIONS"].get("multi_statements", True))
