"""Tests of jobclaims.time: the clock, windows, slots and spans."""
