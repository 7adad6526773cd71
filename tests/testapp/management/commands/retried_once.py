import atexit
import datetime
import os
import time

from jobclaims import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """Fails its first attempt at each fire and succeeds at the retry.

    Set by the environment, so that other tests' schedulers never see it:
    RETRIED_ONCE_SCHEDULE (unset: no schedule) and RETRIED_ONCE_LINGER,
    seconds its failed process lingers after recording its failure, as one
    with a slow teardown does: its scheduler settles the fire that much later.
    """

    help = "Test job: fail the first attempt of each fire, succeed at its retry."
    schedule = os.environ.get("RETRIED_ONCE_SCHEDULE") or None
    lease = datetime.timedelta(seconds=30)
    retries = 2
    retry_backoff = datetime.timedelta(seconds=1)
    retry_backoff_max = datetime.timedelta(seconds=1)

    def run_job(self, run, *args, **options):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid(), step=run.attempt)
        if run.attempt == 1:
            atexit.register(time.sleep, float(os.environ.get("RETRIED_ONCE_LINGER", "0")))
            raise RuntimeError("the first attempt fails")
