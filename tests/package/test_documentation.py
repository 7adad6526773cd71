"""The documentation the code sends users to exists, and says what the tests prove.

The wheel ships no docs/ folder: messages name pages of the site built from
it, through ``jobclaims.checks.page()``. Every call is found in the
source, so a renamed page or heading fails here, not in a user's terminal.
"""

from __future__ import annotations

import ast
import datetime
import functools
import itertools
import json
import re
from difflib import SequenceMatcher
from io import StringIO
from pathlib import Path

import pytest

from jobclaims import checks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SOURCES = sorted((ROOT / "jobclaims").rglob("*.py"))
COMMANDS_PAGE = DOCS / "reference" / "commands.md"
PACKAGE = Path(checks.__file__).parent


def anchors(markdown: Path) -> set[str]:
    """The anchors the site gives the page's headings (docutils' ids)."""
    text = re.sub(r"^```.*?^```", "", markdown.read_text(), flags=re.M | re.S)
    headings = re.findall(r"^#{1,6} (.+)$", text, flags=re.M)
    return {re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") for heading in headings}


def page_calls() -> list[tuple[str, ast.Call]]:
    """Every call of ``page()`` in the package but ``checks._see()``'s: (where, call)."""
    found = []
    for source in SOURCES:
        tree = ast.parse(source.read_text())
        see = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == "_see"
        ]
        inside_see = {id(node) for function in see for node in ast.walk(function)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and id(node) not in inside_see
                and (
                    (isinstance(node.func, ast.Name) and node.func.id == "page")
                    or (isinstance(node.func, ast.Attribute) and node.func.attr == "page")
                )
            ):
                found.append((f"{source.relative_to(ROOT)}:{node.lineno}", node))
    return found


def literal(call: ast.Call) -> tuple[str, str]:
    """``page()``'s path and anchor, which must be written out."""
    values = [str(arg.value) for arg in call.args if isinstance(arg, ast.Constant)]
    assert len(values) == len(call.args), "give page() literal arguments"
    return values[0], (values[1:] or [""])[0]


def see_anchors() -> list[str]:
    """The anchors checks.py passes to ``_see()``, which names the checks page."""
    tree = ast.parse((ROOT / "jobclaims" / "checks.py").read_text())
    return [
        str(node.args[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "_see"
        and isinstance(node.args[0], ast.Constant)
    ]


def test_the_code_names_pages_through_page_with_literal_arguments():
    calls = page_calls()
    assert calls, "page() is no longer found: update this test"
    for where, call in calls:
        assert all(isinstance(arg, ast.Constant) for arg in call.args), (
            f"{where}: give page() literal arguments, so this test can check them"
        )


@pytest.mark.parametrize(
    ("where", "path", "anchor"),
    [(where, *literal(call)) for where, call in page_calls()]
    + [("jobclaims/checks.py _see()", "checks", anchor) for anchor in see_anchors()],
)
def test_every_page_and_heading_the_code_names_exists(where, path, anchor):
    markdown = DOCS / f"{path}.md"
    assert markdown.is_file(), f"{where} names {checks.page(path)}: no {markdown}"
    if anchor:
        assert anchor in anchors(markdown), f"{where}: docs/{path}.md has no heading #{anchor}"


def test_every_check_hint_names_its_section_of_the_checks_page():
    checks_source = (ROOT / "jobclaims" / "checks.py").read_text()
    ids = sorted(set(re.findall(r'id="jobclaims\.([EW]\d{3})"', checks_source)))
    named = {anchor.split("-")[1].upper() for anchor in see_anchors()}
    assert set(ids) - {"E003"} <= named  # E003 names the settings page instead.


def test_no_message_points_to_a_file_the_wheel_does_not_ship():
    for source in SOURCES:
        tree = ast.parse(source.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
            ):
                assert not re.search(r"docs/\w|README\.md", node.value), (
                    f"{source.relative_to(ROOT)}:{node.lineno} points to {node.value!r}; "
                    "name a page of the site with jobclaims.checks.page()"
                )


def table_rows(markdown: Path, first_header: str) -> list[list[str]]:
    """The cells of the markdown table whose header starts with ``first_header``."""
    rows, inside = [], False
    for line in markdown.read_text().splitlines():
        if line.startswith(f"| {first_header} |"):
            inside = True
        elif inside and line.startswith("| ---"):
            continue
        elif inside and line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
        elif inside:
            break
    return rows


def source_of_test(node: str) -> str:
    """The source of the test ``file.py::name`` in tests/, decorators included."""
    file, _, name = node.partition("::")
    path = ROOT / "tests" / file
    assert path.is_file(), f"docs/bad-input.md names {node}: no tests/{file}"
    lines = path.read_text().splitlines()
    for function in ast.parse(path.read_text()).body:
        if isinstance(function, ast.FunctionDef) and function.name == name:
            start = min([function.lineno, *(d.lineno for d in function.decorator_list)])
            return "\n".join(lines[start - 1 : function.end_lineno])
    raise AssertionError(f"docs/bad-input.md names {node}, which tests/{file} does not define")


def messages(quoted: str) -> list[str]:
    """The messages a cell quotes: code spans, split where "…" elides or " / "
    separates two; short spans (a check's id, a command) are left out."""
    return [
        piece.strip()
        for span in re.findall(r"`([^`]+)`", quoted)
        for piece in re.split(r"…| / ", span)
        if len(piece.strip()) >= 16
    ]


def longest_shared(piece: str, text: str) -> int:
    return SequenceMatcher(None, piece, text, autojunk=False).find_longest_match().size


@functools.cache
def package_strings() -> str:
    """Every string literal in the package, f-strings' literal parts included."""
    return "\n".join(
        node.value
        for source in SOURCES
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


BAD_INPUT = table_rows(DOCS / "bad-input.md", "input")


@pytest.mark.parametrize("row", BAD_INPUT, ids=[row[0][:40] for row in BAD_INPUT])
def test_each_bad_input_row_names_tests_that_check_its_message(row):
    _input, _where, error, proved_by = row
    nodes = re.findall(r"`([\w/.]+::\w+)`", proved_by)
    assert nodes, f"the row for {row[0]} names no test"
    tests = "\n".join(source_of_test(node).replace("\\", "") for node in nodes)
    quoted = messages(error)
    assert any(longest_shared(message, tests) >= 16 for message in quoted), (
        f"none of {nodes} checks a message the row for {row[0]} quotes"
    )
    code = package_strings()
    for message in quoted:
        # 14 characters in a row: messages fill values in every few words.
        assert longest_shared(message, code) >= 14, (
            f"the row for {row[0]} quotes {message!r}, which jobclaims no longer says"
        )


def test_the_bad_input_table_was_read():
    assert len(BAD_INPUT) >= 30


def test_the_settings_page_lists_every_key_with_its_default():

    from jobclaims.conf import SETTINGS

    rows = table_rows(DOCS / "settings.md", "key")
    documented = {
        row[0].strip("`"): eval(row[1].strip("`"), {"timedelta": datetime.timedelta})
        for row in rows
    }
    assert documented == {key: setting.default for key, setting in SETTINGS.items()}


def test_the_checks_page_lists_and_explains_every_check():
    registered = set(
        re.findall(r'id="(jobclaims\.[EW]\d{3})"', (ROOT / "jobclaims" / "checks.py").read_text())
    )
    listed = {row[0].strip("`") for row in table_rows(DOCS / "checks.md", "id")}
    explained = {
        f"jobclaims.{anchor.split('-')[1].upper()}"
        for anchor in anchors(DOCS / "checks.md")
        if anchor.startswith("jobclaims-")
    }
    assert registered == listed == explained


#: The JSON objects keyed by job name, not by field: their keys are not compared.
JSON_MAPS = {"missed_windows", "schedulers.schedules"}


def undocumented(written: object, documented: object, path: str = "") -> list[str]:
    """The fields ``written`` and ``documented`` do not share, object by
    object: a list's first item stands for each of its items."""
    if isinstance(written, list) and isinstance(documented, list):
        if written and documented:
            return undocumented(written[0], documented[0], path)
        return []
    if not isinstance(written, dict) or not isinstance(documented, dict) or path in JSON_MAPS:
        return []
    differ = [f"{path}.{key}".lstrip(".") for key in set(written) ^ set(documented)]
    for key in set(written) & set(documented):
        differ += undocumented(written[key], documented[key], f"{path}.{key}".lstrip("."))
    return sorted(differ)


@pytest.mark.django_db
def test_jobclaims_status_json_has_the_documented_fields():
    from django.core.management import call_command

    from jobclaims.jobs.claiming import claim
    from jobclaims.models import JobRun

    with claim("sync_ledger", window="hourly", key="2026-11-29T10:00"):
        pass
    # A scheduled job's last run, for --schedules.
    JobRun.objects.claim("nightly_latest", "2026-11-29T00:00+00:00", lease=datetime.timedelta(1))
    out = StringIO()
    # Every option that adds to the document.
    call_command("jobclaims_status", "--json", "--missed", "--schedules", "--output", stdout=out)
    written = json.loads(out.getvalue())
    page = COMMANDS_PAGE.read_text()
    [example] = re.findall(r"^```json\n(.*?)^```", page, flags=re.M | re.S)
    documented = json.loads(example)
    assert set(written) == set(documented)
    assert written["claims"], "no claim to compare"
    assert written["schedules"], "no schedule to compare"
    assert undocumented(written, documented) == []


# The reference pages name what the code defines; these read the code, so a
# new option, exit status, command or JSON key fails here until it is documented.


def section(markdown: Path, heading: str) -> str:
    """The text under ``## heading``, up to the next heading of its level."""
    text = markdown.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def shipped_commands() -> list[str]:
    return sorted(
        path.stem
        for path in (PACKAGE / "management" / "commands").glob("*.py")
        if not path.stem.startswith("_")
    )


def per_job_attributes() -> list[str]:
    """What a ``JobCommand`` subclass may set: the public, non-callable class
    attributes ``JobCommand`` and its bases in jobclaims add to Django's command."""
    from django.core.management.base import BaseCommand

    from jobclaims.jobs.commands import JobCommand

    return [
        name
        for cls in JobCommand.__mro__
        if cls.__module__.startswith("jobclaims")
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and not hasattr(BaseCommand, name)
        and not callable(value)
        and not isinstance(value, (property, classmethod, staticmethod))
    ]


def documented_attributes() -> set[str]:
    """The attributes of ``JobCommand`` with a ``#:`` comment: those that
    docs/_ext/jobclaims_reference.py puts in docs/settings.md's per-job table."""
    import inspect

    from jobclaims.jobs.commands import JobCommand

    lines = inspect.getsource(JobCommand).splitlines()
    return {
        match.group(1)
        for previous, line in itertools.pairwise(lines)
        if previous.strip().startswith("#:") and (match := re.match(r"\s{4}(\w+)\s*[:=]", line))
    }


def test_the_per_job_table_has_every_attribute_a_job_may_set():
    attributes = per_job_attributes()
    assert {"window", "lease"} <= set(attributes), "update per_job_attributes()"
    missing = sorted(set(attributes) - documented_attributes())
    assert not missing, (
        f"JobCommand's {missing} have no #: comment above them in jobclaims/jobs/commands.py, "
        "which docs/settings.md's per-job table is read from"
    )
    settings_page = (DOCS / "settings.md").read_text()
    assert "```{jobclaims-job-options}\n" in settings_page
    # --window, --lease, --wait...: the options every job has, from its parser.
    assert "```{jobclaims-help} JobCommand\n" in settings_page


def test_every_command_has_its_help_on_the_commands_page():
    page = COMMANDS_PAGE.read_text()
    for name in [*shipped_commands(), "JobCommand"]:
        assert f"```{{jobclaims-help}} {name}\n" in page, f"docs/reference/commands.md lacks {name}"


def status_text(node: ast.expr, constants: dict[str, int]) -> str | None:
    """An exit status as the page writes it: ``3``, or ``128 + N``."""
    if isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    ):
        return "1"  # A message, which Python prints before it exits 1.
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return str(node.value)
    if isinstance(node, ast.Name) and node.id in constants:
        return str(constants[node.id])
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add)
        and isinstance(node.left, ast.Constant)
        and node.left.value == 128
    ):
        return "128 + N"
    return None


def exit_statuses() -> dict[str, set[str]]:
    """Each exit status the package sets (``returncode=``, ``SystemExit``,
    ``sys.exit``), with the modules that set it."""
    found: dict[str, set[str]] = {}
    for source in SOURCES:
        tree = ast.parse(source.read_text())
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, int)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            values = [kw.value for kw in node.keywords if kw.arg == "returncode"]
            name = ast.unparse(node.func)
            if name in {"SystemExit", "sys.exit"} and node.args:
                values.append(node.args[0])
            for value in values:
                status = status_text(value, constants)
                assert status, (
                    f"{source.relative_to(ROOT)}:{node.lineno}: an exit status "
                    "this test cannot read; give it a name bound to an int"
                )
                found.setdefault(status, set()).add(source.stem)
    return found


def test_every_exit_status_the_code_sets_is_documented_with_its_command():
    statuses = exit_statuses()
    assert {"124", "128 + N"} <= set(statuses), "exit_statuses() no longer finds them"
    rows = {row[0]: row[1] for row in table_rows(COMMANDS_PAGE, "status")}
    for status, modules in sorted(statuses.items()):
        assert status in rows, f"docs/reference/commands.md's exit statuses lack {status}"
        for module in modules & set(shipped_commands()):
            assert module in rows[status], f"the exit status {status} row does not name {module}"


def test_the_exit_statuses_say_what_each_command_exits_with():
    text = section(COMMANDS_PAGE, "Exit status")
    for name in shipped_commands():
        assert f"`{name}`" in text, f"docs/reference/commands.md's exit statuses leave {name} out"
