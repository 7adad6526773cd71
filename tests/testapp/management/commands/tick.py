import datetime
import os
import time

from jobclaims import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """Charges once per fire, every two seconds, for the scheduler tests."""

    help = "Test job: charge the ledger at every fire of a two-second schedule."
    schedule = "*/2 * * * * *"
    lease = datetime.timedelta(seconds=6)
    # Another host may start the next fire while this one still runs.
    allow_overlap = True
    # tests/scheduling/test_retention.py catches every fire up, from the newest claim.
    misfire = os.environ.get("TICK_MISFIRE", "latest")

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid())
        time.sleep(float(os.environ.get("TICK_HOLD", "0")))
