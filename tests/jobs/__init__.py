"""Tests of jobclaims.jobs: JobCommand, schedules, claim() and @claimed."""
