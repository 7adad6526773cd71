import os

from jobclaims import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """A job whose schedule, misfire policy and name each deploy sets
    (RESCHEDULED_SCHEDULE, RESCHEDULED_MISFIRE, RESCHEDULED_JOB_NAME); unset,
    it has no schedule and claims as "rescheduled"."""

    help = "Test job: charge the ledger at each fire of the schedule a deploy gives it."
    schedule = os.environ.get("RESCHEDULED_SCHEDULE") or None
    job_name = os.environ.get("RESCHEDULED_JOB_NAME") or None
    misfire = os.environ.get("RESCHEDULED_MISFIRE", "all")

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid())
