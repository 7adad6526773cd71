import datetime
import os
import time

from jobclaims import JobCommand
from tests.testapp.models import Charge

#: Charge.step of the row a run writes as it starts, and of the one it
#: writes when its work is done: the outcome the stop tests count.
STARTED, DONE = 0, 1


class Command(JobCommand):
    """Charges at the end of a run that takes a few seconds, every five seconds."""

    help = "Test job: start, work SLOW_HOLD seconds, then charge the ledger."
    schedule = "*/5 * * * * *"
    # Long enough that a heartbeat held up on a loaded machine never lets
    # another host take a live run over: a stop's hand-off needs no lease.
    lease = datetime.timedelta(seconds=30)
    allow_overlap = True

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid(), step=STARTED)
        time.sleep(float(os.environ.get("SLOW_HOLD", "4")))
        Charge.objects.create(
            job=run.job, window=run.window, pid=os.getpid(), attempt=run.attempt, step=DONE
        )
