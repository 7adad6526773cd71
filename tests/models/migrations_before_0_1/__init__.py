"""The ten migrations jobclaims had before 0.1.0, which replaced them with one,
and what 0.1.0's schema gained since, each a migration of the chain.

tests/models/test_migrations.py applies them (``MIGRATION_MODULES``) to prove that
``jobclaims/migrations/0001_initial.py`` builds the same schema. They are
copies of the chain as it stood, but for the data migration in
``0003_job_run_slots``: see there. Until 0.1.0 is published, a change to the
schema is made in 0001_initial and added here as a migration of its own.
"""
