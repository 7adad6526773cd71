"""Under tox the suite tests the installed wheel, not the checkout.

tox.ini installs the wheel a release would publish and runs the tests from a
tree without the jobclaims folder (scripts/tree-without-package). Were the
checkout's package imported instead, by pytest or by a process a test starts,
a file the wheel leaves out would go unnoticed: these tests say so first.
Outside tox (an editable install, ``JOBCLAIMS_TESTS_INSTALLED`` unset) they skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.template import engines

import jobclaims
from jobclaims.running.children import child_environment
from tests.support.helpers import run_python

CHECKOUT = Path(__file__).resolve().parents[2] / "jobclaims"
INSTALLED = Path(jobclaims.__file__).resolve().parent

pytestmark = pytest.mark.skipif(
    os.environ.get("JOBCLAIMS_TESTS_INSTALLED") != "1",
    reason="tox runs the suite against the installed wheel; this run imports the checkout",
)


def test_the_suite_imports_the_installed_package():
    assert INSTALLED != CHECKOUT
    assert "site-packages" in INSTALLED.parts, f"jobclaims imported from {INSTALLED}"


def test_a_process_the_tests_start_imports_the_installed_package():
    # As the racers, the scheduler's jobs and the Celery workers start: from
    # this working directory, with the import path passed on.
    child = run_python("import jobclaims; print(jobclaims.__file__)", env=child_environment())
    assert child.returncode == 0, child.stderr
    assert Path(child.stdout.strip()).resolve().parent == INSTALLED
    assert INSTALLED != CHECKOUT


def test_the_templates_and_static_files_come_from_the_wheel():
    # Django's own engine, which says where it found a template (the stubs lack .engine).
    engine = engines["django"].engine  # type: ignore[attr-defined]
    _template, origin = engine.find_template("admin/jobclaims/jobrun/change_list.html")
    assert Path(origin.name).resolve().is_relative_to(INSTALLED)
    stylesheet = finders.find("jobclaims/admin.css")
    assert stylesheet
    assert Path(stylesheet).resolve().is_relative_to(INSTALLED)
    assert (INSTALLED / "contrib" / "prometheus" / "rules.yml").is_file()
    assert (INSTALLED / "migrations" / "0001_initial.py").is_file()
