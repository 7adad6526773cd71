import datetime
import os
import signal
import threading

from jobclaims import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """Writes one charge, then its main thread hangs while the heartbeat beats on.

    SIGUSR1 ends the hang, so a test decides when the stale holder wakes up.
    """

    help = "Test job: charge the ledger, then hang."
    window = "hourly"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--hang", type=float, default=60, help="Seconds to hang at most.")
        parser.add_argument("--max-run-time", type=float, help="Seconds; the job's max_run_time.")

    def handle(self, *args, max_run_time, **options):
        if max_run_time is not None:
            self.max_run_time = datetime.timedelta(seconds=max_run_time)
        super().handle(*args, **options)

    def run_job(self, run, *args, hang, **options):
        woken = threading.Event()
        signal.signal(signal.SIGUSR1, lambda signum, frame: woken.set())
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid(), attempt=run.attempt)
        # Stuck, as on a socket read without a timeout, until SIGUSR1.
        woken.wait(hang)
