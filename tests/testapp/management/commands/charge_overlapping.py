from tests.testapp.management.commands import charge_ledger


class Command(charge_ledger.Command):
    """The same job, allowed to run two windows at once."""

    allow_overlap = True
