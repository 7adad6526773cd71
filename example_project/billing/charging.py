"""The work of the nightly billing job, with no protection of its own."""

import os
import time

from example_project.billing.models import Charge, Invoice

# Stands in for the payment provider's round trip; it is what gives a second
# instance time to read the same unpaid invoices.
PROVIDER_DELAY = 0.2


def charge_unpaid_invoices() -> int:
    """Charge every unpaid invoice and mark it paid. Returns how many."""
    unpaid = list(Invoice.objects.filter(paid=False))
    for invoice in unpaid:
        time.sleep(PROVIDER_DELAY)
        Charge.objects.create(
            invoice=invoice, amount_cents=invoice.amount_cents, charged_by_pid=os.getpid()
        )
        Invoice.objects.filter(pk=invoice.pk).update(paid=True)
    return len(unpaid)
