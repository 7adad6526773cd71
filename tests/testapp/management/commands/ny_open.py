import os

from jobclaims import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """A daily job read in New York, whatever TIME_ZONE: 02:30 there, a time
    its spring-forward night skips."""

    help = "Test job: charge the ledger at 02:30 New York time."
    schedule = "30 2 * * *"
    time_zone = "America/New_York"

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid())
