import datetime
import os
import threading

from jobclaims.commands import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """Writes one charge, then its main thread hangs while the heartbeat beats on."""

    help = "Test job: charge the ledger, then hang."
    window = "hourly"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--hang", type=float, default=60, help="Seconds to hang.")
        parser.add_argument("--max-run-time", type=float, help="Seconds; the job's max_run_time.")

    def handle(self, *args, max_run_time, **options):
        if max_run_time is not None:
            self.max_run_time = datetime.timedelta(seconds=max_run_time)
        super().handle(*args, **options)

    def run_job(self, run, *args, hang, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid(), attempt=run.attempt)
        # An event nobody sets: the main thread is stuck, as on a lost socket.
        threading.Event().wait(hang)
