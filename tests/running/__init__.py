"""Tests of jobclaims.running: a run under its claim."""
