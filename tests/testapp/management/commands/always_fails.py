import datetime
import os
import time

from jobclaims import JobCommand


class Command(JobCommand):
    """Fails at every attempt, writing a line per attempt first."""

    help = "Test job: append a line to ATTEMPTS_FILE, then fail."
    schedule = "*/15 * * * * *"
    lease = datetime.timedelta(seconds=6)
    allow_overlap = True
    retries = 3
    retry_backoff = datetime.timedelta(seconds=1)
    retry_backoff_max = datetime.timedelta(seconds=1.5)

    def run_job(self, run, *args, **options):
        line = f"{run.window} {run.attempt} {os.getpid()} {time.time():.3f}\n"
        # One write to a file opened for appending: whole lines, whatever
        # process writes them.
        fd = os.open(os.environ["ATTEMPTS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        raise RuntimeError("the ledger is closed")
