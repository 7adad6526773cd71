import os
import time

from django.core.management.base import BaseCommand

from jobclaims import claimed
from tests.testapp.models import Charge


@claimed("charge_decorated", window="hourly")
def charge(window_hint: str) -> int:
    Charge.objects.create(job="charge_decorated", window=window_hint, pid=os.getpid())
    time.sleep(0.3)
    return Charge.objects.count()


class Command(BaseCommand):
    """A plain command whose work is a function decorated with @claimed."""

    def handle(self, *args, **options):
        if charge("current") is None:
            self.stdout.write("Skipped charge_decorated: claimed elsewhere.")
        else:
            self.stdout.write("Ran charge_decorated.")
