"""MariaDB: the pauses read, a claim of a new window, its commit and the read behind it, as one procedure.

A claim on MariaDB was three round trips: a read of the job's pauses and of
the runs covering its slot, then one message of the claim's INSERT, a COMMIT
and the read that refuses a claim once it committed, then the release. The
INSERT cannot read the pauses itself: an INSERT ... SELECT takes the table's
AUTO-INC lock for the whole statement (jobclaims.claims.backends.mysql). A
procedure can read first and then insert with VALUES, so
jobclaims_claim_then_read() does all of it on the server, as PostgreSQL's
procedure of the same name (0003) does, and answers in one row: the run's
id and clock stamps (id NULL where nothing was inserted: a pause or a run of
the slot refused it, read first and answered, or a unique key is taken),
then what refuses the claim, in the columns of PostgreSQL's (all NULL where
nothing does). Its INSERT fails at once (1205) rather than wait where
another transaction is writing the claim's key, as the INSERT it replaces
did. It must be called outside a transaction, as the claim is.

Sent to MariaDB alone (not MySQL), and called only where MariaDB returns
rows from an INSERT and is not a Galera node, as the message it replaces
was. The token is text: native UUID columns (10.7+) and the char(32) of
older servers both take it. Written here, whole, not imported.
"""

from django.db import migrations

from jobclaims.migrations._operations import RunSQLOnMariaDB

CREATE = """
CREATE PROCEDURE jobclaims_claim_then_read(
    IN claim_job VARCHAR(200), IN claim_window VARCHAR(64), IN claim_schedule VARCHAR(32),
    IN claim_owner VARCHAR(255), IN claim_token VARCHAR(36), IN claim_holds_job BOOLEAN,
    IN claim_slot_start DATETIME(6), IN claim_slot_end DATETIME(6), IN claim_series VARCHAR(16),
    IN lease_us BIGINT, IN parent_job VARCHAR(200), IN all_jobs VARCHAR(200), IN read_slot BOOLEAN)
BEGIN
    DECLARE new_id BIGINT DEFAULT NULL;
    DECLARE now_ DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    DECLARE refusal VARCHAR(16) DEFAULT NULL;
    -- A pause's reason is TEXT; a run's owner, VARCHAR(255).
    DECLARE who, said, job_or_status TEXT DEFAULT NULL;
    DECLARE since, until_ DATETIME(6) DEFAULT NULL;
    SELECT 'paused', p.paused_by, p.reason, p.job, p.paused_at, p.`until`
    INTO refusal, who, said, job_or_status, since, until_
    FROM jobclaims_jobpause p
    WHERE (p.job IN (claim_job, parent_job, all_jobs)
           OR p.job IN (SELECT tag FROM jobclaims_jobtag WHERE job = parent_job))
      AND p.resumed_at IS NULL AND (p.`until` IS NULL OR p.`until` > now_)
    ORDER BY p.paused_at DESC, p.id DESC LIMIT 1;
    IF refusal IS NULL AND claim_slot_start IS NOT NULL THEN
        SELECT 'slot-ran', r.`window`, r.owner, r.status, r.expires_at, r.finished_at
        INTO refusal, who, said, job_or_status, since, until_
        FROM jobclaims_jobrun r
        WHERE r.job = claim_job AND r.slot_end > claim_slot_start AND r.slot_start < claim_slot_end
          AND r.`window` <> claim_window
          AND ((r.status = 'running' AND r.expires_at > now_) OR r.status = 'succeeded')
        ORDER BY r.slot_end LIMIT 1;
    END IF;
    IF refusal IS NULL THEN
        SET STATEMENT innodb_lock_wait_timeout = 0 FOR
        INSERT IGNORE INTO jobclaims_jobrun
            (job, `window`, schedule, owner, token, holds_job, slot_start, slot_end, series,
             status, attempt, failures, error, claimed_at, expires_at)
        VALUES (claim_job, claim_window, claim_schedule, claim_owner, claim_token, claim_holds_job,
                claim_slot_start, claim_slot_end, claim_series,
                'running', 1, 0, '', now_, now_ + INTERVAL lease_us MICROSECOND);
        IF ROW_COUNT() = 1 THEN
            SET new_id = LAST_INSERT_ID();
            COMMIT;
            SELECT 'paused', p.paused_by, p.reason, p.job, p.paused_at, p.`until`
            INTO refusal, who, said, job_or_status, since, until_
            FROM jobclaims_jobpause p
            WHERE (p.job IN (claim_job, parent_job, all_jobs)
                   OR p.job IN (SELECT tag FROM jobclaims_jobtag WHERE job = parent_job))
              AND p.resumed_at IS NULL AND (p.`until` IS NULL OR p.`until` > UTC_TIMESTAMP(6))
            ORDER BY p.paused_at DESC, p.id DESC LIMIT 1;
            IF refusal IS NULL AND read_slot THEN
                SELECT 'slot-ran', r.`window`, r.owner, r.status, r.expires_at, r.finished_at
                INTO refusal, who, said, job_or_status, since, until_
                FROM jobclaims_jobrun r
                WHERE r.job = claim_job AND r.slot_end > claim_slot_start AND r.slot_start < claim_slot_end
                  AND r.`window` <> claim_window AND r.status = 'succeeded'
                ORDER BY r.slot_end LIMIT 1;
            END IF;
        END IF;
    END IF;
    SELECT new_id, now_, now_ + INTERVAL lease_us MICROSECOND,
           refusal, who, said, job_or_status, since, until_;
END

"""

DROP = "DROP PROCEDURE jobclaims_claim_then_read"


class Migration(migrations.Migration):

    dependencies = [
        ("jobclaims", "0003_postgresql_claim_procedure"),
    ]

    operations = [
        RunSQLOnMariaDB(CREATE, DROP),
    ]
