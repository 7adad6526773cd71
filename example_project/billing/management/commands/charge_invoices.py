import datetime

from example_project.billing.charging import charge_unpaid_invoices
from jobclaims.commands import JobCommand


class Command(JobCommand):
    help = "Charge every unpaid invoice, once a day, on one server only."
    window = "daily"
    lease = datetime.timedelta(minutes=30)

    def run_job(self, run, *args, **options):
        charged = charge_unpaid_invoices()
        self.stdout.write(f"Charged {charged} invoices.")
