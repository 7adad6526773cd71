import datetime
import os

from jobclaims import JobCommand
from tests.testapp.models import Charge

#: What each deploy of the job declares, by the name DEPLOYED_WINDOW gives it.
WINDOWS = {"3600 s": datetime.timedelta(hours=1), "hourly": "hourly", "daily": "daily"}


def _declared() -> dict[str, object]:
    """The attributes this deploy's code declares, from the environment."""
    declared: dict[str, object] = {"schedule": os.environ.get("DEPLOYED_SCHEDULE") or None}
    if (window := os.environ.get("DEPLOYED_WINDOW", "hourly")) != "none":
        declared["window"] = WINDOWS[window]
    return declared


class Command(JobCommand):
    """A job whose window and schedule each deploy changes (DEPLOYED_WINDOW,
    DEPLOYED_SCHEDULE; "none": the window line removed)."""

    help = "Test job: charge once per slot, whatever the deploy calls it."
    vars().update(_declared())

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid())
