"""``from jobclaims.commands import JobCommand``, as jobs have written it
since the first release: the base class lives in ``jobclaims.jobs.commands``
and is exported from ``jobclaims`` itself. Kept so that those imports work."""

from jobclaims.jobs.commands import JobCommand
from jobclaims.jobs.schedules import Schedule

__all__ = ["JobCommand", "Schedule"]
