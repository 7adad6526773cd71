"""Tests of jobclaims.scheduling: schedulers on several hosts."""
