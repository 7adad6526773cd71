from django.core.management.base import BaseCommand
from django.db.models import Count, Sum

from example_project.billing.models import Charge, Invoice
from jobclaims.models import JobRun
from jobclaims.testing import race

INVOICES = {"INV-001": 1200, "INV-002": 4500, "INV-003": 990}


class Command(BaseCommand):
    help = "Start two instances of the billing job at the same instant, twice."

    def handle(self, *args, **options):
        self.stdout.write("Two servers start the billing job at the same instant.\n")
        self._round("charge_invoices_unprotected", "Without jobclaims")
        self._round("charge_invoices", "With jobclaims (JobCommand)")

    def _round(self, command: str, title: str) -> None:
        self._reset()
        self.stdout.write(self.style.MIGRATE_HEADING(f"{title}: manage.py {command} x2"))
        for number, result in enumerate(race(command, instances=2), start=1):
            self.stdout.write(f"  instance {number}: {result.outcome}")
            for line in (result.stdout + result.stderr).strip().splitlines():
                self.stdout.write(f"    | {line}")
        self._report()

    def _reset(self) -> None:
        JobRun.objects.filter(job="charge_invoices").delete()
        Charge.objects.all().delete()
        Invoice.objects.all().delete()
        Invoice.objects.bulk_create(
            Invoice(number=number, amount_cents=cents) for number, cents in INVOICES.items()
        )

    def _report(self) -> None:
        billed = sum(INVOICES.values())
        taken = Charge.objects.aggregate(total=Sum("amount_cents"))["total"] or 0
        doubled = Invoice.objects.annotate(n=Count("charges")).filter(n__gt=1).count()
        line = (
            f"  Result: {Charge.objects.count()} charges for {len(INVOICES)} invoices; "
            f"customers owed ${billed / 100:.2f} and paid ${taken / 100:.2f}."
        )
        if doubled:
            self.stdout.write(self.style.ERROR(f"{line} {doubled} invoices charged twice.\n"))
        else:
            self.stdout.write(self.style.SUCCESS(f"{line} Each invoice charged once.\n"))
