"""Tests of jobclaims.monitoring: health, jobclaims_status, missed windows."""
