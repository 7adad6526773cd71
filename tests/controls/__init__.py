"""Tests of jobclaims.controls: operators' pauses, retirements, backfills and pruning."""
