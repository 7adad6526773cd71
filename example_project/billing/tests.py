"""The proof this project asks of every job: two servers, one charge each."""

from example_project.billing.models import Charge, Invoice
from jobclaims.testing import RaceTestCase


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

    def test_without_jobclaims_two_servers_charge_each_invoice_twice(self):
        results = self.race("charge_invoices_unprotected", instances=2)
        self.assertEqual([result.outcome for result in results], ["ran", "ran"])
        self.assertEqual(Charge.objects.count(), 6)
