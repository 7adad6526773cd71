import os
import time

from jobclaims import JobCommand
from jobclaims.time import leases


class Command(JobCommand):
    """Appends one line per run to NEMESIS_RUNS, for tests/faults/nemesis: the count
    of runs comes from the job's own side effect, never from the claims.

    Each run also says when it started and until when it knew its lease
    held, on this host's clock (the racers share one host), at its start
    and at its end (renewals move it): the nemesis tells a run that started
    while another's lease held from one that took over a holder stalled
    past its lease after it had started.
    """

    help = "Test job: append this run to the file NEMESIS_RUNS names."
    # Windows of their own: a holder paused mid-run must not hold the next.
    allow_overlap = True

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--hold", type=float, default=0, help="Seconds to keep running.")

    def run_job(self, run, *args, hold, **options):
        pid = os.getpid()
        self._write(f"{run.window} {pid} {run.attempt} {leases.clock():.3f} {run.held_until:.3f}")
        time.sleep(hold)
        self._write(f"end {run.window} {pid} {run.held_until:.3f}")

    @staticmethod
    def _write(line: str) -> None:
        fd = os.open(os.environ["NEMESIS_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)
