"""The documentation the code sends users to exists, and says what the tests prove.

The wheel ships no docs/ folder: messages name pages of the site built from
it, through ``jobclaims.documentation.page()``. Every call is found in the
source, so a renamed page or heading fails here, not in a user's terminal.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from jobclaims import documentation

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SOURCES = sorted((ROOT / "jobclaims").rglob("*.py"))


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
    assert markdown.is_file(), f"{where} names {documentation.page(path)}: no {markdown}"
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
                    "name a page of the site with jobclaims.documentation.page()"
                )
