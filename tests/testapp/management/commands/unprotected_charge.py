import os
import time

from django.core.management.base import BaseCommand

from tests.testapp.models import Charge


class Command(BaseCommand):
    """A job with no protection: reads, waits, then charges if nothing was charged."""

    def handle(self, *args, **options):
        already = Charge.objects.filter(job="unprotected").exists()
        # The provider's round trip: long enough that two instances the race
        # kit releases together both read before either charges, even on a
        # loaded machine, where 0.3 s once let one finish first.
        time.sleep(1.5)
        if not already:
            Charge.objects.create(job="unprotected", window="-", pid=os.getpid())
        self.stdout.write("Charged.")
