"""The manager every jobclaims model has: it reads and writes in the claims database."""

from __future__ import annotations

from typing import TypeVar

from django.db import models

from jobclaims.conf import jobclaims_settings

_M = TypeVar("_M", bound=models.Model)


class ClaimsDatabaseManager(models.Manager[_M]):
    """Reads and writes in the claims database, unless told otherwise.

    The claims database is ``JOBCLAIMS["DATABASE"]``, else the router's
    choice for writes: a claim read from a lagging replica could let a
    second instance in, or miss a job only the primary has seen.
    ``using()`` and ``db_manager()`` still choose another.
    """

    def get_queryset(self) -> models.QuerySet[_M]:
        return super().get_queryset().using(self.claims_db())

    def claims_db(self) -> str:
        """The alias this manager reads and writes: the claims database, or
        the one ``db_manager()`` chose."""
        return self._db or jobclaims_settings.claims_database(self.model)
