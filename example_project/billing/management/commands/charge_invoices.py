import datetime

from example_project.billing.charging import charge_unpaid_invoices
from jobclaims import JobCommand


class Command(JobCommand):
    help = "Charge every unpaid invoice, once a day, on one server only."
    # jobclaims_scheduler starts it at 02:05 in TIME_ZONE; the daily window
    # keeps its claims keyed by day, as when a crontab line started it.
    schedule = "5 2 * * *"
    window = "daily"
    lease = datetime.timedelta(minutes=30)

    def run_job(self, run, *args, **options):
        # Each charge commits only while this run still holds the claim.
        charged = charge_unpaid_invoices(guard=run.fenced)
        self.stdout.write(f"Charged {charged} invoices.")
