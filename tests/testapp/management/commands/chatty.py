import datetime
import logging
import os
import subprocess
import sys

from jobclaims import JobCommand


class Command(JobCommand):
    """Prints CHATTY_BYTES (default 10 MB) of numbered lines, every way a job
    prints: print(), self.stdout, self.stderr, logging and a subprocess; then
    fails if CHATTY_FAIL is set."""

    help = "Test job: print a lot, then end with a line naming the window, in markup."
    window = os.environ.get("CHATTY_WINDOW", "daily")
    lease = datetime.timedelta(seconds=30)

    def run_job(self, run, *args, **options):
        size = int(os.environ.get("CHATTY_BYTES", 10 * 1024 * 1024))
        line = "x" * 90 + "\n"
        for number in range(size // 100):
            print(f"{number:08d} {line}", end="")
        self.stdout.write("from self.stdout")
        self.stderr.write("from self.stderr")
        logging.getLogger("jobclaims.tests").warning("from logging")
        subprocess.run([sys.executable, "-c", "print('from a subprocess')"], check=True)
        print(f"<b>done</b> & {run.window} \N{SNOWMAN}")
        if os.environ.get("CHATTY_FAIL"):
            raise RuntimeError("chatty failed on purpose")
