import datetime
import os

from jobclaims import JobCommand, Schedule
from jobclaims.time.clock import database_now
from tests.testapp.models import Charge

#: How many calls fire at once, each its own schedule.
CALLS = 8


class Command(JobCommand):
    """Many calls due at one instant, spread by jitter: each records how long
    after its claim it started."""

    help = "Test job: charge the ledger, recording how long after its claim it started."
    schedules = [Schedule("*/20 * * * * *", args=["--call", str(call)]) for call in range(CALLS)]
    jitter = datetime.timedelta(seconds=15)
    lease = datetime.timedelta(seconds=10)

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--call")

    def run_job(self, run, *args, **options):
        late = database_now() - run.claimed_at
        Charge.objects.create(
            job=options["call"] or "",
            window=run.window,
            pid=os.getpid(),
            step=int(late.total_seconds() * 1000),
        )
