from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    """``fleet_job`` without jobclaims: a plain command that claims nothing.

    What ``call_command`` costs Django and argparse alone, which a
    ``JobCommand`` called the same way pays before its claim
    (benchmarks/uncontended.py).
    """

    help = "Benchmark baseline: does nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="Taken, as fleet_job takes it.")

    def handle(self, *args: Any, **options: Any) -> None:
        pass
