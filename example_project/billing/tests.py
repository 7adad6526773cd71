"""The proof this project asks of every job: two servers, one charge each."""

import datetime
from io import StringIO

from django.core.management import call_command

from example_project.billing.models import Charge, Invoice
from jobclaims.models import JobRun
from jobclaims.testing import RaceTestCase, schedules_in_force_since


class ChargeInvoicesTests(RaceTestCase):
    def setUp(self):
        Invoice.objects.bulk_create(
            Invoice(number=f"INV-{n}", amount_cents=1000 * n) for n in (1, 2, 3)
        )

    def test_two_servers_at_once_charge_each_invoice_once(self):
        results = self.race("charge_invoices", instances=2)
        self.assertRanOnce(results)
        self.assertEqual(Charge.objects.count(), 3)
        self.assertFalse(Invoice.objects.filter(paid=False).exists())

    def test_the_scheduler_on_three_servers_charges_each_invoice_once(self):
        # Deployed yesterday: today's 02:05 fire was due, so the scheduler runs it.
        schedules_in_force_since(datetime.timedelta(days=1))
        results = self.race(
            "jobclaims_scheduler", "--once", "--job", "charge_invoices", instances=3
        )
        self.assertEqual([result.returncode for result in results], [0, 0, 0])
        started = [result for result in results if "Started charge_invoices" in result.stdout]
        self.assertEqual(len(started), 1)
        self.assertIn("Charged 3 invoices.", started[0].stdout)
        self.assertEqual(Charge.objects.count(), 3)
        run = JobRun.objects.get(job="charge_invoices")
        self.assertEqual((run.status, run.attempt), (JobRun.Status.SUCCEEDED, 1))

    def test_without_jobclaims_two_servers_charge_each_invoice_twice(self):
        results = self.race("charge_invoices_unprotected", instances=2)
        self.assertEqual([result.outcome for result in results], ["ran", "ran"])
        self.assertEqual(Charge.objects.count(), 6)


class DemoTests(RaceTestCase):
    def test_the_demo_charges_twice_without_jobclaims_and_once_with_it(self):
        out = StringIO()
        call_command("demo", stdout=out, no_color=True)
        results = [line for line in out.getvalue().splitlines() if "Result:" in line]
        self.assertEqual(len(results), 3, out.getvalue())
        self.assertIn("3 invoices charged twice", results[0])
        for with_jobclaims in results[1:]:
            self.assertIn("3 charges for 3 invoices", with_jobclaims)
            self.assertIn("Each invoice charged once", with_jobclaims)
        self.assertEqual(out.getvalue().count("started the job"), 1, out.getvalue())
