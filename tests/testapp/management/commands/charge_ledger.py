import os
import time
from contextlib import nullcontext

from django.db import transaction

from jobclaims import JobCommand
from tests.testapp.models import Charge


class Command(JobCommand):
    """Writes one charge per run, then holds its claim a while."""

    help = "Test job: charge the ledger once per window."
    window = "hourly"
    tags = ("billing",)

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--say", default="", help="Printed before the claim is tried.")
        parser.add_argument("--hold", type=float, default=0, help="Seconds to keep running.")
        parser.add_argument("--fail", action="store_true", help="Raise after charging.")
        parser.add_argument(
            "--hold-transaction",
            type=float,
            default=0,
            help="Seconds to keep the charge's transaction open before committing it.",
        )

    def handle(self, *args, say, **options):
        if say:
            self.stdout.write(say)
        super().handle(*args, **options)

    def run_job(self, run, *args, hold, fail, hold_transaction, **options):
        with transaction.atomic() if hold_transaction else nullcontext():
            Charge.objects.create(job=run.job, window=run.window, pid=os.getpid())
            self.stdout.write(f"charging as attempt {run.attempt}", ending="\n")
            self.stdout.flush()
            time.sleep(hold_transaction)
        time.sleep(hold)
        if fail:
            raise RuntimeError("the payment provider is down")
