"""The shipped alert rules, held to what docs/monitoring.md says of them by
promtool (Debian's prometheus package): rules_test.yml beside this file,
run against the rules the installed package ships."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jobclaims.contrib.prometheus
from tests.support.helpers import unavailable

RULES = Path(jobclaims.contrib.prometheus.__file__).parent / "rules.yml"
TESTS = Path(__file__).resolve().parent / "rules_test.yml"
#: How rules_test.yml names the rules, from the checkout.
IN_THE_CHECKOUT = "../../jobclaims/contrib/prometheus/rules.yml"


def promtool(*arguments: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        unavailable("promtool is missing (apt-get install prometheus)")
    return subprocess.run(["promtool", *arguments], capture_output=True, text=True, timeout=120)


def test_the_rules_are_valid():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_keep_alerts_firing_while_the_database_or_the_scrape_is_gone(tmp_path):
    tests = TESTS.read_text()
    assert IN_THE_CHECKOUT in tests
    (tmp_path / "rules_test.yml").write_text(tests.replace(IN_THE_CHECKOUT, str(RULES)))
    done = promtool("test", "rules", str(tmp_path / "rules_test.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
