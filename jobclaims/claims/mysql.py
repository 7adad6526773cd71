"""MariaDB's and MySQL's claim statements, written whole, and their errors
that mean "try again"; on a Galera node, the settings that make claims exact.

Every time is ``UTC_TIMESTAMP(6)``: Django stores UTC, and
``CURRENT_TIMESTAMP`` is the session's local time. ``%(name)s`` are the
statement's parameters; the names of tables and columns are the models'
own (tests/test_sql.py holds them together).
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
    (job, `window`, schedule, owner, token, holds_job, slot_start, slot_end,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES (%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
        %(slot_start)s, %(slot_end)s,
        'running', 1, 0, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL %(lease)s MICROSECOND)
RETURNING id, claimed_at, expires_at
"""

#: ``INSERT_UNLESS_TAKEN`` on a Galera node: without the server's retry of an
#: autocommitted statement that lost certification (see ``GALERA_NO_RETRY``).
INSERT_UNLESS_TAKEN_ON_GALERA = """
SET STATEMENT innodb_lock_wait_timeout = 0, wsrep_retry_autocommit = 0 FOR INSERT IGNORE
INTO jobclaims_jobrun
    (job, `window`, schedule, owner, token, holds_job, slot_start, slot_end,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES (%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
        %(slot_start)s, %(slot_end)s,
        'running', 1, 0, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL %(lease)s MICROSECOND)
RETURNING id, claimed_at, expires_at
"""

#: The newest pause in force of the job, or of the job a schedule's claim
#: name belongs to: not resumed, and its ``until`` (if any) not come. The
#: (job, resumed_at) index finds it.
PAUSE = """
SELECT paused_by, paused_at, reason, `until`
FROM jobclaims_jobpause
WHERE job IN (%(job)s, %(parent_job)s) AND resumed_at IS NULL
  AND (`until` IS NULL OR `until` > UTC_TIMESTAMP(6))
ORDER BY paused_at DESC, id DESC
LIMIT 1
"""

#: The window's first claim after a read found no row in its way;
#: ``IntegrityError`` when a contender inserted first. MySQL, which cannot
#: return rows from an INSERT, reads its key and stamps back (``READ_BACK``).
INSERT = """
INSERT INTO jobclaims_jobrun
    (job, `window`, schedule, owner, token, holds_job, slot_start, slot_end,
     status, attempt, failures, error, claimed_at, expires_at)
VALUES (%(job)s, %(window)s, %(schedule)s, %(owner)s, %(token)s, %(holds_job)s,
        %(slot_start)s, %(slot_end)s,
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
#: is ``rule.frees`` without ``force`` (tests/test_rule.py holds them
#: together): the window's live or succeeded row, or another window's live
#: holder, the window's own row first. MariaDB 10.5 and later, not on
#: Galera, whose node orders an INSERT's read after the cluster's writes
#: only when told for INSERTs too.
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
        AND ((r.status = 'running' AND r.expires_at > UTC_TIMESTAMP(6))
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
  AND ((r.status = 'running' AND r.expires_at > UTC_TIMESTAMP(6))
       OR r.status = 'succeeded')
LIMIT 1
ON DUPLICATE KEY UPDATE
    count = count + 1, owner = VALUES(owner), skipped_at = VALUES(skipped_at)
RETURNING reason
"""

#: The run's outcome, if it still holds its claim. On Galera the server may
#: retry it when another node's write to the row wins certification; that
#: is right here: it returns no rows, so the client is told only the
#: retry's row count, and the retry finds the row taken over.
RELEASE = """
UPDATE jobclaims_jobrun
SET status = %(status)s, error = %(error)s, holds_job = NULL,
    finished_at = UTC_TIMESTAMP(6)
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
        except DatabaseError:  # 1193: a MariaDB built without Galera.
            return False
        (on,) = cursor.fetchone()
    return bool(on)
