from django.core.management.base import BaseCommand

from example_project.billing.charging import charge_unpaid_invoices


class Command(BaseCommand):
    help = "The same billing job without jobclaims, to show what goes wrong."

    def handle(self, *args, **options):
        charged = charge_unpaid_invoices()
        self.stdout.write(f"Charged {charged} invoices.")
