import os
import time

from jobclaims import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """Charges in steps, each write fenced by the claim, with a pause between."""

    help = "Test job: charge the ledger in fenced steps."
    window = "hourly"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--steps", type=int, default=3)
        parser.add_argument("--pause", type=float, default=0.5, help="Seconds between steps.")

    def run_job(self, run, *args, steps, pause, **options):
        for step in range(steps):
            with run.fenced():
                Charge.objects.create(
                    job=run.job, window=run.window, pid=os.getpid(), attempt=run.attempt, step=step
                )
            self.stdout.write(f"step {step} done")
            self.stdout.flush()
            time.sleep(pause)
