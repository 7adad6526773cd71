"""A django-health-check check that fails while a job is unhealthy.

Install with ``pip install jobclaims[health]`` (django-health-check 4),
and list it among the checks of the project's health view::

    path("health/", HealthCheckView.as_view(checks=[
        "health_check.checks.Database",
        "jobclaims.contrib.health_check.ScheduledJobs",
    ])),

What healthy means is ``jobclaims.monitoring.health``'s: a job's due window
succeeded, its last run did not fail, no holder of it died.
"""

from __future__ import annotations

import dataclasses

from django.db import DatabaseError, connections
from health_check.base import HealthCheck
from health_check.exceptions import ServiceUnavailable

from jobclaims.conf import jobclaims_settings
from jobclaims.models import JobRun
from jobclaims.monitoring import bounded
from jobclaims.monitoring.health import job_health


@dataclasses.dataclass
class ScheduledJobs(HealthCheck):
    """Unavailable while any job with a claim is overdue, failed or held by a dead holder."""

    def run(self) -> None:
        # django-health-check runs a synchronous check in a thread of its
        # own: a connection it opens there is closed before the thread is
        # reused, as Django closes a request's.
        alias = jobclaims_settings.claims_database(JobRun)
        opened_here = connections[alias].connection is None
        try:
            unhealthy = [health for health in bounded.within(job_health) if not health.healthy]
        except DatabaseError as error:
            # Within HEALTH_TIMEOUT, however the database hangs (bounded.within).
            raise ServiceUnavailable("the claims database did not answer") from error
        finally:
            if opened_here:
                # Asked anew: a read cut off while connecting keeps its own.
                connections[alias].close()
        if unhealthy:
            # Job names and what is wrong, not the error texts: the page may be public.
            raise ServiceUnavailable(
                "; ".join(f"{health.job}: {', '.join(health.kinds)}" for health in unhealthy)
            )
