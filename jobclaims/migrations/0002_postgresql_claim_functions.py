"""PostgreSQL: a claim of a new window and the read behind its commit, as functions.

Every scheduled run sends these two statements, on every server, for the
life of a project. Sent as text, PostgreSQL plans each afresh every time,
and planning the claim's INSERT, with its checks of the job's pauses and of
the runs covering its slot, costs it more than running it
(docs/performance.md). A PL/pgSQL function keeps its statements' plans for
the session, and binds each parameter once.

jobclaims_claim() is jobclaims.claims.backends.postgresql's claim of a
window nobody holds: it inserts the run unless the job is paused, a run of
another window covering its slot is held or succeeded, or a unique key is
taken, and fails at once (lock_not_available) rather than wait where
another transaction is writing that key. jobclaims_refused_after_claim()
is the read that refuses a claim once it committed: the newest pause in
force of the job, else a run of another window covering the claim's slot
that succeeded (none without a slot).

The functions are written here, whole, not imported: a later change to the
package must not change what this migration does; a change to a function
is a migration of its own. Other databases keep their statements as text.
"""

from django.db import migrations

from jobclaims.migrations._operations import RunSQLOnPostgreSQL

#: A pause in force holds for the job, for the job a schedule's claim name
#: belongs to, for one of that job's tags, or for all jobs
#: (``jobclaims.claims.naming``). The (job, resumed_at) index finds the
#: pauses, the (job, slot_end) index the runs. Columns that share a name
#: with a function's result are named with their table's.
CREATE = """
CREATE FUNCTION jobclaims_claim(
    claim_job text, claim_window text, claim_schedule text, claim_owner text,
    claim_token uuid, claim_holds_job boolean,
    claim_slot_start timestamptz, claim_slot_end timestamptz, claim_series text,
    claim_lease interval, parent_job text, all_jobs text)
RETURNS TABLE (id bigint, claimed_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    -- For this statement's own transaction; 1 ms, since 0 turns it off.
    PERFORM set_config('lock_timeout', '1', true);
    RETURN QUERY
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
    RETURNING jobclaims_jobrun.id, jobclaims_jobrun.claimed_at, jobclaims_jobrun.expires_at;
END
$$;

CREATE FUNCTION jobclaims_refused_after_claim(
    claim_job text, claim_window text,
    claim_slot_start timestamptz, claim_slot_end timestamptz,
    parent_job text, all_jobs text)
RETURNS TABLE (found text, who text, said text, job_or_status text,
               since timestamptz, "until" timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    (SELECT 'paused'::text, pause.paused_by::text, pause.reason::text, pause.job::text,
            pause.paused_at, pause."until"
     FROM jobclaims_jobpause pause
     WHERE (pause.job IN (claim_job, parent_job, all_jobs)
            OR pause.job IN (SELECT tag FROM jobclaims_jobtag WHERE job = parent_job))
       AND pause.resumed_at IS NULL
       AND (pause."until" IS NULL OR pause."until" > STATEMENT_TIMESTAMP())
     ORDER BY pause.paused_at DESC, pause.id DESC
     LIMIT 1)
    UNION ALL
    (SELECT 'slot-ran'::text, other."window"::text, other.owner::text, other.status::text,
            other.expires_at, other.finished_at
     FROM jobclaims_jobrun other
     WHERE other.job = claim_job
       AND other.slot_end > claim_slot_start AND other.slot_start < claim_slot_end
       AND other."window" <> claim_window AND other.status = 'succeeded'
     ORDER BY other.slot_end
     LIMIT 1);
END
$$;
"""

DROP = """
DROP FUNCTION jobclaims_refused_after_claim(text, text, timestamptz, timestamptz, text, text);
DROP FUNCTION jobclaims_claim(
    text, text, text, text, uuid, boolean, timestamptz, timestamptz, text, interval, text, text);
"""


class Migration(migrations.Migration):

    dependencies = [
        ("jobclaims", "0001_initial"),
    ]

    operations = [
        RunSQLOnPostgreSQL(CREATE, DROP),
    ]
