import datetime
import os
import signal
import threading
import time

from jobclaims import JobCommand
from jobclaims.exceptions import ClaimLost
from tests.testapp.models import Charge

#: Charge.step of the rows a run writes: as it starts, each fenced write that
#: committed, each fenced write the claim refused, and its clean-up as it ends.
STARTED, FENCED, REFUSED, CLEANED = 0, 1, 2, 3


def _seconds(variable, default=None):
    value = os.environ.get(variable)
    return datetime.timedelta(seconds=float(value)) if value else default


class Command(JobCommand):
    """Writes under its claim every 50 ms until stopped, and will not stop by itself.

    Set by the environment, so that other tests' schedulers never see it:
    STUBBORN_SCHEDULE (unset: no schedule), STUBBORN_TIMEOUT and
    STUBBORN_GRACE (seconds), STUBBORN_LEASE (seconds),
    STUBBORN_IGNORES_SIGTERM (set: it ignores SIGTERM, as a job stuck in a
    C call does), STUBBORN_HANDLES_SIGTERM (set: its own SIGTERM handler
    stops its work, and run_job() returns) and STUBBORN_BLOCKS (set: it
    waits in one blocking call instead of writing, as on a socket read). A
    refused fenced write is recorded, unfenced, and the run goes on; a stop
    it does not ignore tries one more fenced write on its way out. Its
    clean-up, however it ends, is a row of its own.
    """

    help = "Test job: write under the claim until stopped."
    schedule = os.environ.get("STUBBORN_SCHEDULE") or None
    allow_overlap = True
    lease = _seconds("STUBBORN_LEASE")
    timeout = _seconds("STUBBORN_TIMEOUT")
    timeout_grace = _seconds("STUBBORN_GRACE", datetime.timedelta(seconds=10))

    def run_job(self, run, *args, **options):
        stopped = threading.Event()
        if os.environ.get("STUBBORN_IGNORES_SIGTERM"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.environ.get("STUBBORN_HANDLES_SIGTERM"):
            signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
        self._charge(run, STARTED)
        try:
            if os.environ.get("STUBBORN_BLOCKS"):
                time.sleep(120)
            while not stopped.is_set():
                self._write_fenced(run)
                time.sleep(0.05)
        except BaseException:
            self._write_fenced(run)
            raise
        finally:
            self._charge(run, CLEANED)

    def _write_fenced(self, run):
        try:
            with run.fenced():
                self._charge(run, FENCED)
        except ClaimLost:
            self._charge(run, REFUSED)

    def _charge(self, run, step):
        Charge.objects.create(job=run.job, window=run.window, pid=os.getpid(), step=step)
