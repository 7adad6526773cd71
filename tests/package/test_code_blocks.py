"""Every code block in README.md and docs/ is run, parsed or checked as written.

A reader copies these blocks into a project, so a name that moved, an
import left out or an option renamed must fail here, not there.

- Python: each block runs whole, in a namespace of its own, in a process
  forked from one that has Django set up on the test settings: a block
  defines jobs, tasks, receivers and URL patterns, and whatever it calls at
  its top runs. The reader's own project is the docs' ``billing`` app: its
  modules import, and their names are placeholders, so a block may import
  them, and only a function's body may call them (``charge_unpaid_invoices()``).
  A settings excerpt may use ``BASE_DIR``, as startproject's settings do, and
  its ``JOBCLAIMS`` must pass jobclaims' own validation.
- Console lines, cron lines, systemd units, Kubernetes manifests and a
  Procfile: every ``manage.py`` command parses with the command's own
  parser (tests/package/test_command_blocks.py), and some run for real.
- JSON parses; SQL, PromQL and the checks' sample output match what the
  code says. The Sphinx directives are built, warnings as errors, by
  ``make docs`` in CI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<code>.*?)^```", re.M | re.S)


def blocks(*infos: str) -> list[tuple[str, str]]:
    """Every block whose fence info is one of ``infos``: (where, code)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in FENCE.finditer(text):
            if block["info"].strip() in infos:
                line = text[: block.start()].count("\n") + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", block["code"]))
    return found


BLOCKS = blocks("python")

# One interpreter with Django set up, forked once per block: each block runs
# in a child, as a module of its own, and a failure is its traceback.
_RUN_EACH = """
import importlib.abc, importlib.machinery, json, os, sys, traceback, types
from pathlib import Path
import django

django.setup()
from django.test import override_settings
from jobclaims import conf


class ReaderModule(types.ModuleType):
    \"\"\"A module of the reader's project: any name it is asked for is there.\"\"\"

    __path__ = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__module__": self.__name__})


class ReaderProject(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] == "billing":
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return ReaderModule(spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, ReaderProject())
failed = {}
for where, code in json.loads(sys.stdin.read()):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            namespace = {"__name__": "docs_block", "BASE_DIR": Path("/srv/shop")}
            exec(compile(code, where, "exec"), namespace)
            if "JOBCLAIMS" in namespace:
                given = {"JOBCLAIMS": namespace["JOBCLAIMS"]}
                if "DATABASES" in namespace:
                    given["DATABASES"] = namespace["DATABASES"]
                with override_settings(**given):
                    assert not conf.problems(), conf.problems()
        except BaseException:
            os.write(write, traceback.format_exc().encode())
            os._exit(1)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as said:
        error = said.read()
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]):
        failed[where] = error or "exited without a traceback"
print(json.dumps(failed))
"""


@pytest.fixture(scope="module")
def failures() -> dict[str, str]:
    """Each block that failed, by where it is, with its traceback."""
    runnable = [block for block in BLOCKS if not _needs_missing_module(block[1])]
    done = subprocess.run(
        [sys.executable, "-c", _RUN_EACH],
        input=json.dumps(runnable),
        capture_output=True,
        text=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    failed: dict[str, str] = json.loads(done.stdout)
    return failed


def _needs_missing_module(code: str) -> bool:
    """Whether the block imports Django's tasks framework where this Django has none."""
    return "from django.tasks" in code and importlib.util.find_spec("django.tasks") is None


def test_the_pages_have_python_blocks():
    assert len(BLOCKS) >= 30
    assert any(where.startswith("README.md") for where, _ in BLOCKS)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child per block")
@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_the_block_runs_as_written(where, code, failures):
    if _needs_missing_module(code):
        pytest.skip("Django's tasks framework (6.0+): the newest pair's run runs this block")
    assert where not in failures, failures.get(where)


def test_a_block_that_names_what_it_does_not_import_would_fail():
    code = (
        "from jobclaims import JobCommand\n\n"
        "class Command(JobCommand):\n"
        "    lease = datetime.timedelta(minutes=5)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", _RUN_EACH],
        input=json.dumps([("example", code)]),
        capture_output=True,
        text=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        check=True,
    )
    assert "NameError: name 'datetime' is not defined" in json.loads(done.stdout)["example"]


# The blocks that are not Python: each kind has its check here, in
# test_command_blocks.py (commands), or in `make docs` (Sphinx directives).
CHECKED = {"python", "console", "cron", "ini", "yaml", "", "json", "sql", "promql", "text"}
BUILT_BY_SPHINX = ("{eval-rst}", "{toctree}", "{jobclaims-", "{literalinclude}")


def test_every_kind_of_block_has_a_check():
    kinds = {block["info"].strip() for page in PAGES for block in FENCE.finditer(page.read_text())}
    unchecked = {kind for kind in kinds - CHECKED if not kind.startswith(BUILT_BY_SPHINX)}
    assert not unchecked, f"no test reads these blocks: {unchecked}"


@pytest.mark.parametrize(("where", "code"), blocks("json"), ids=[w for w, _ in blocks("json")])
def test_each_json_block_parses(where, code):
    json.loads(code)


def test_each_sql_statement_is_one_the_w003_hint_gives():
    from jobclaims.claims.charsets import CONVERSION
    from jobclaims.models import JobRun, JobSkip

    given = {f"ALTER TABLE {model._meta.db_table} {CONVERSION};" for model in (JobRun, JobSkip)}
    statements = [line for _, code in blocks("sql") for line in code.splitlines() if line]
    assert statements
    assert set(statements) <= given


def test_each_promql_query_reads_metrics_jobclaims_exports():
    source = (ROOT / "jobclaims" / "contrib" / "prometheus" / "metrics.py").read_text()
    for where, code in blocks("promql"):
        names = set(re.findall(r"\b(jobclaims_\w+?)(?:_total|_count|_sum|_bucket)?\b", code))
        assert names, where
        for name in names:
            assert f'"{name}"' in source or f'"{name}' in source, f"{where}: {name}"


def test_the_checks_sample_output_is_what_the_checks_say():
    from django.test import override_settings

    from jobclaims import checks
    from jobclaims.jobs.commands import JobCommand, problems, tag_problems

    samples = "\n".join(code for _, code in blocks("text"))
    with override_settings(JOBCLAIMS={"DEFAULT_LEASE": 600}):
        [error] = checks.check_settings()
    assert f"?: (jobclaims.E003) {error.msg}\n\tHINT: {error.hint}" in samples

    class Command(JobCommand):
        window = "daliy"

    [problem] = problems("charge_invoices", Command)
    assert f"?: (jobclaims.W007) {problem}" in samples
    [tagged] = tag_problems("charge_invoices", ["card processor"])
    assert f"?: (jobclaims.W007) {tagged}" in samples


def test_the_architecture_map_names_folders_and_modules_that_exist():
    [layers] = [code for where, code in blocks("text") if where.startswith("docs/architecture")]
    named = re.findall(r"^ \w+\s+([\w/., ]+?)(?:\s{2,}|$)", layers, re.M)
    paths = [path.strip() for cell in named for path in cell.split(",") if path.strip()]
    assert len(paths) >= 10, paths
    for path in paths:
        found = ROOT / "jobclaims" / path.rstrip("/")
        assert found.exists() or found.with_suffix(".py").exists(), path


def test_each_report_shown_bare_is_one_make_bench_writes():
    written = "\n".join(path.read_text() for path in (ROOT / "benchmarks").glob("*.py"))
    reports = [
        (where, code)
        for where, code in blocks("")
        if not code.startswith(("make ", "DATABASE_URL=", "scheduler: "))
    ]
    assert len(reports) >= 3
    for where, code in reports:
        title = code.partition(":")[0]  # "jobclaims claim benchmark", "Fleet"
        assert re.search(rf'f?"{re.escape(title)}:', written), f"{where}: {title}"
