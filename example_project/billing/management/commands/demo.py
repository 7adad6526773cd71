import datetime

from django.core.management.base import BaseCommand
from django.db.models import Count, Sum

from example_project.billing.models import Charge, Invoice
from jobclaims.models import JobRun
from jobclaims.testing import InstanceResult, race, schedules_in_force_since

INVOICES = {"INV-001": 1200, "INV-002": 4500, "INV-003": 990}


class Command(BaseCommand):
    help = "Start two instances of the billing job at the same instant, twice."

    def handle(self, *args, **options):
        self.stdout.write("Two servers start the billing job at the same instant.\n")
        self._round("charge_invoices_unprotected", "Without jobclaims")
        self._round("charge_invoices", "With jobclaims (JobCommand)")
        self.stdout.write("Three servers each run the scheduler; it starts the due job.\n")
        # Deployed yesterday, so today's 02:05 fire is due: a scheduler runs
        # no fire from before its job's schedule came into force.
        schedules_in_force_since(datetime.timedelta(days=1))
        self._round(
            "jobclaims_scheduler",
            "With jobclaims' scheduler on every server",
            "--once",
            *("--job", "charge_invoices"),
            instances=3,
        )

    def _round(self, command: str, title: str, *args: str, instances: int = 2) -> None:
        self._reset()
        shown = " ".join((command, *args))
        self.stdout.write(self.style.MIGRATE_HEADING(f"{title}: manage.py {shown} x{instances}"))
        results = race(command, *args, instances=instances)
        for number, result in enumerate(results, start=1):
            self.stdout.write(f"  instance {number}: {_outcome(command, result, results)}")
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
        charges = Invoice.objects.annotate(n=Count("charges"))
        doubled, missed = charges.filter(n__gt=1).count(), charges.filter(n=0).count()
        line = (
            f"  Result: {Charge.objects.count()} charges for {len(INVOICES)} invoices; "
            f"customers owed ${billed / 100:.2f} and paid ${taken / 100:.2f}."
        )
        if doubled:
            self.stdout.write(self.style.ERROR(f"{line} {doubled} invoices charged twice.\n"))
        elif missed:
            self.stdout.write(self.style.ERROR(f"{line} {missed} invoices not charged.\n"))
        else:
            self.stdout.write(self.style.SUCCESS(f"{line} Each invoice charged once.\n"))


def _outcome(command: str, result: InstanceResult, results: list[InstanceResult]) -> str:
    """What an instance did: a scheduler's job runs in a process of its own."""
    if command != "jobclaims_scheduler":
        return result.outcome
    if _started(result):
        return "started the job"
    if any(_started(other) for other in results):
        return "started nothing: another server's claim won"
    return "started nothing"


def _started(result: InstanceResult) -> bool:
    return "Started " in result.stdout
