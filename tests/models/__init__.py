"""Tests of jobclaims.models and the migration."""
