import os
import time

from django.core.management.base import BaseCommand

from tests.testapp.models import Charge


class Command(BaseCommand):
    """A job with no protection: reads, waits, then charges if nothing was charged."""

    def handle(self, *args, **options):
        already = Charge.objects.filter(job="unprotected").exists()
        time.sleep(0.3)
        if not already:
            Charge.objects.create(job="unprotected", window="-", pid=os.getpid())
        self.stdout.write("Charged.")
