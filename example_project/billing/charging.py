"""The work of the nightly billing job, with no protection of its own."""

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from example_project.billing.models import Charge, Invoice

# Stands in for the payment provider's round trip; it is what gives a second
# instance time to read the same unpaid invoices, even when the two start a
# few hundred milliseconds apart on a busy machine.
PROVIDER_DELAY = 0.5


def charge_unpaid_invoices(
    guard: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> int:
    """Charge every unpaid invoice and mark it paid. Returns how many.

    Each charge is written inside ``guard()``: the jobclaims job passes
    ``run.fenced``, so a run that lost its claim cannot write a charge.
    """
    unpaid = list(Invoice.objects.filter(paid=False))
    for invoice in unpaid:
        time.sleep(PROVIDER_DELAY)
        with guard():
            Charge.objects.create(
                invoice=invoice,
                amount_cents=invoice.amount_cents,
                charged_by_pid=os.getpid(),
            )
            Invoice.objects.filter(pk=invoice.pk).update(paid=True)
    return len(unpaid)
