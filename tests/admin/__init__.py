"""Tests of jobclaims.admin, through the test client and in a real browser."""
