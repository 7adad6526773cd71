"""Tests of jobclaims.claims: the rule, the statements, races and retries."""
