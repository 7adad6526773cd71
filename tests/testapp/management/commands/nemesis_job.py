import os
import time

from jobclaims.commands import JobCommand


class Command(JobCommand):
    """Appends one line per run to NEMESIS_RUNS, for tests/nemesis: the count
    of runs comes from the job's own side effect, never from the claims."""

    help = "Test job: append this run to the file NEMESIS_RUNS names."
    # Windows of their own: a holder paused mid-run must not hold the next.
    allow_overlap = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--hold", type=float, default=0, help="Seconds to keep running.")

    def run_job(self, run, *args, hold, **options):
        line = f"{run.window} {os.getpid()} {run.attempt}\n".encode()
        fd = os.open(os.environ["NEMESIS_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        time.sleep(hold)
