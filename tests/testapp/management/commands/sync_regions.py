import datetime
import os
import time

from jobclaims import JobCommand, Schedule
from tests.testapp.models import Charge


class Command(JobCommand):
    """One job, two regions: each schedule passes its region and claims its own fires."""

    help = "Test job: charge the ledger for one region at every fire of its schedule."
    schedules = [
        Schedule("*/3 * * * * *", args=["--region", "eu"]),
        # The same instants, read in another zone: keyed there, with its offset.
        Schedule("*/3 * * * * *", args=["--region", "us"], time_zone="America/New_York"),
    ]
    lease = datetime.timedelta(seconds=10)

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--region")

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=options["region"] or "", window=run.window, pid=os.getpid())
        # Long enough that the two regions' runs of a fire overlap.
        time.sleep(float(os.environ.get("SYNC_HOLD", "1")))
