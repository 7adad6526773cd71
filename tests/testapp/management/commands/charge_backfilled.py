import os
import time

from jobclaims import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """An hourly job for the backfill tests: it charges, then holds a while."""

    help = "Test job: charge the ledger once per hour, holding CHARGE_HOLD seconds."
    # tests/package/test_checks.py gives it a window with a typo (CHARGE_WINDOW).
    window = os.environ.get("CHARGE_WINDOW", "hourly")

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid())
        time.sleep(float(os.environ.get("CHARGE_HOLD", "0")))
        if run.window == os.environ.get("CHARGE_FAIL_WINDOW"):
            raise RuntimeError("the payment provider is down")
