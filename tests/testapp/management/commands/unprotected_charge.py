import os
import time

from django.core.management.base import BaseCommand, CommandError

from tests.testapp.models import Charge

#: Charge.job of the rows that say an instance has read, apart from the charges.
READ = "unprotected-read"


class Command(BaseCommand):
    """A job with no protection: reads, then charges if nothing was charged.

    Between its read and its charge it waits, as for a provider's round trip,
    until ``--together`` instances have read: then they all charge, whatever
    the machine's load, as two instances do whenever their round trips overlap.
    """

    def add_arguments(self, parser):
        parser.add_argument("--together", type=int, default=1)

    def handle(self, *args, **options):
        already = Charge.objects.filter(job="unprotected").exists()
        Charge.objects.create(job=READ, window="-", pid=os.getpid())
        deadline = time.monotonic() + 30
        while Charge.objects.filter(job=READ).count() < options["together"]:
            if time.monotonic() > deadline:
                raise CommandError("the other instances did not read within 30 s")
            time.sleep(0.05)
        if not already:
            Charge.objects.create(job="unprotected", window="-", pid=os.getpid())
        self.stdout.write("Charged.")
