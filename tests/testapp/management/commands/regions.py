import datetime
import json
import os
import time

from jobclaims import JobCommand, Schedule
from tests.testapp.management.commands.appended import append


def _schedules() -> list[Schedule]:
    """A schedule per region, every REGIONS_SCHEDULE (unset: none), named by
    its region in a deploy that sets REGIONS_NAMED, by its arguments before,
    bounded by REGIONS_BOUNDS (JSON: ``Schedule``'s start, end, skip_dates
    and max_runs)."""
    expression = os.environ.get("REGIONS_SCHEDULE")
    if not expression:
        return []
    named = os.environ.get("REGIONS_NAMED") == "1"
    bounds = json.loads(os.environ.get("REGIONS_BOUNDS", "{}"))
    return [
        Schedule(expression, args=["--region", region], name=region if named else None, **bounds)
        for region in ("eu", "us")
    ]


class Command(JobCommand):
    """One job, a schedule per region, which a deploy renames: it appends a
    line to the file APPENDED_LOG as each run of a region starts and ends,
    whatever its schedule is named."""

    help = "Test job: append a line per region as each run starts and as it ends."
    tags = ("billing", "regions")
    schedules = _schedules()
    lease = datetime.timedelta(seconds=10)
    # A fire's process, slow to start on a loaded machine, may still run at
    # the next fire: that one starts beside it, on another host; unless
    # REGIONS_OVERLAP names another policy (``JobCommand.overlap``).
    overlap = os.environ.get("REGIONS_OVERLAP", "allow")
    # REGIONS_FORKED=1: forked from the scheduler's fork server, as a fleet
    # with many fires would run it (each start then costs milliseconds).
    fresh_interpreter = os.environ.get("REGIONS_FORKED") != "1"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--region")

    def run_job(self, run, *args, **options):
        append(f"start {options['region']}@{run.window} {os.getpid()}")
        time.sleep(float(os.environ.get("REGIONS_HOLD", "0.3")))
        append(f"end {options['region']}@{run.window} {os.getpid()}")
