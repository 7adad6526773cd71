import os

from jobclaims.commands import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """A job whose schedule and misfire policy each deploy sets
    (RESCHEDULED_SCHEDULE, RESCHEDULED_MISFIRE); unset, it has no schedule."""

    help = "Test job: charge the ledger at each fire of the schedule a deploy gives it."
    schedule = os.environ.get("RESCHEDULED_SCHEDULE") or None
    misfire = os.environ.get("RESCHEDULED_MISFIRE", "all")

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid())
