"""``from jobclaims.claiming import claim, claimed, window_key``, as code has
written it since the first release: they live in ``jobclaims.jobs.claiming``
and are exported from ``jobclaims`` itself. Kept so that those imports work."""

from jobclaims.jobs.claiming import claim, claimed, window_key

__all__ = ["claim", "claimed", "window_key"]
