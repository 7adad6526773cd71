import os

from jobclaims import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """A nightly job whose missed fires are handled with misfire = "all"."""

    help = "Test job: charge the ledger at midnight."
    schedule = "0 0 * * *"
    misfire = "all"

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid())
