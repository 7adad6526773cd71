"""PostgreSQL: a claim of a new window, its commit and the read behind it, as one procedure.

Migration 0002 made the claim and its read after the commit two functions,
sent in one message with the COMMIT between them: three statements, three
results for the client to take apart, and a wait for each. A procedure
called outside any transaction may commit inside, so
jobclaims_claim_then_read() does all three on the server and answers with
one row: the client spends less CPU on each claim and the claim returns
sooner (docs/performance.md, "One call, one row").

It claims as jobclaims_claim() does and, if it inserted the run, commits
it; the read after the commit then takes its snapshot after the claim
committed, and so sees any pause (and, with read_slot, any success of the
claim's slot) that committed first, which the INSERT's own checks could not
see. Its row is the run's id and clock stamps (NULL: nothing was inserted,
and nothing read), then what refuses the claim, as
jobclaims_refused_after_claim() answers it, its first column named refusal
(FOUND is PL/pgSQL's own); all NULL where nothing does. Its times are in
UTC, without a zone: psycopg loads those in C, while Django's loader of
times with a zone is Python, and costs the client about 14 µs a value. It must be called
outside a transaction, as the claim is, and fails at once
(lock_not_available) rather than wait where another transaction is writing
the claim's key, as jobclaims_claim() does.

The functions of 0002 stay: code of the release before this one calls them
while a deploy rolls. The procedure is written here, whole, not imported,
as 0002's functions are.
"""

from django.db import migrations

from jobclaims.migrations._operations import RunSQLOnPostgreSQL

CREATE = """
CREATE PROCEDURE jobclaims_claim_then_read(
    claim_job text, claim_window text, claim_schedule text, claim_owner text,
    claim_token uuid, claim_holds_job boolean,
    claim_slot_start timestamptz, claim_slot_end timestamptz, claim_series text,
    claim_lease interval, parent_job text, all_jobs text, read_slot boolean,
    INOUT id bigint DEFAULT NULL,
    INOUT claimed_at timestamp DEFAULT NULL, INOUT expires_at timestamp DEFAULT NULL,
    INOUT refusal text DEFAULT NULL, INOUT who text DEFAULT NULL, INOUT said text DEFAULT NULL,
    INOUT job_or_status text DEFAULT NULL,
    INOUT since timestamp DEFAULT NULL, INOUT "until" timestamp DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    -- For the claim's own transaction; 1 ms, since 0 turns it off.
    PERFORM set_config('lock_timeout', '1', true);
    INSERT INTO jobclaims_jobrun
        (job, "window", schedule, owner, token, holds_job, slot_start, slot_end, series,
         status, attempt, failures, error, claimed_at, expires_at)
    SELECT claim_job, claim_window, claim_schedule, claim_owner, claim_token, claim_holds_job,
           claim_slot_start, claim_slot_end, claim_series,
           'running', 1, 0, '', STATEMENT_TIMESTAMP(), STATEMENT_TIMESTAMP() + claim_lease
    WHERE NOT EXISTS (
        SELECT FROM jobclaims_jobpause pause
        WHERE (pause.job IN (claim_job, parent_job, all_jobs)
               OR pause.job IN (SELECT tag FROM jobclaims_jobtag WHERE job = parent_job))
          AND pause.resumed_at IS NULL
          AND (pause."until" IS NULL OR pause."until" > STATEMENT_TIMESTAMP()))
      AND NOT EXISTS (
        SELECT FROM jobclaims_jobrun other
        WHERE other.job = claim_job
          AND other.slot_end > claim_slot_start AND other.slot_start < claim_slot_end
          AND other."window" <> claim_window
          AND ((other.status = 'running' AND other.expires_at > STATEMENT_TIMESTAMP())
               OR other.status = 'succeeded'))
    ON CONFLICT DO NOTHING
    RETURNING jobclaims_jobrun.id, jobclaims_jobrun.claimed_at AT TIME ZONE 'UTC',
              jobclaims_jobrun.expires_at AT TIME ZONE 'UTC'
    INTO id, claimed_at, expires_at;
    IF id IS NULL THEN
        RETURN;
    END IF;
    COMMIT;
    -- A new transaction: what committed before the claim did is seen.
    SELECT 'paused', pause.paused_by, pause.reason, pause.job,
           pause.paused_at AT TIME ZONE 'UTC', pause."until" AT TIME ZONE 'UTC'
    INTO refusal, who, said, job_or_status, since, "until"
    FROM jobclaims_jobpause pause
    WHERE (pause.job IN (claim_job, parent_job, all_jobs)
           OR pause.job IN (SELECT tag FROM jobclaims_jobtag WHERE job = parent_job))
      AND pause.resumed_at IS NULL
      AND (pause."until" IS NULL OR pause."until" > STATEMENT_TIMESTAMP())
    ORDER BY pause.paused_at DESC, pause.id DESC
    LIMIT 1;
    IF refusal IS NULL AND read_slot THEN
        SELECT 'slot-ran', other."window", other.owner, other.status,
               other.expires_at AT TIME ZONE 'UTC', other.finished_at AT TIME ZONE 'UTC'
        INTO refusal, who, said, job_or_status, since, "until"
        FROM jobclaims_jobrun other
        WHERE other.job = claim_job
          AND other.slot_end > claim_slot_start AND other.slot_start < claim_slot_end
          AND other."window" <> claim_window AND other.status = 'succeeded'
        ORDER BY other.slot_end
        LIMIT 1;
    END IF;
END
$$;
"""

DROP = """
DROP PROCEDURE jobclaims_claim_then_read(
    text, text, text, text, uuid, boolean, timestamptz, timestamptz, text, interval, text, text,
    boolean, bigint, timestamp, timestamp, text, text, text, text, timestamp, timestamp);
"""


class Migration(migrations.Migration):

    dependencies = [
        ("jobclaims", "0002_postgresql_claim_functions"),
    ]

    operations = [
        RunSQLOnPostgreSQL(CREATE, DROP),
    ]
