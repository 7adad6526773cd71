"""Tests of jobclaims.contrib: Celery, Prometheus."""
