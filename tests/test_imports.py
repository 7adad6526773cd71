"""No module of the package imports one that imports it back, and each imports first.

The graph counts every import a module names, at its top, inside a function
or only for type checking: a cycle hidden in a function still ties two
modules together for a reader.
"""

from __future__ import annotations

import ast
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import jobclaims

PACKAGE = Path(jobclaims.__file__).parent
MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages([str(PACKAGE)], "jobclaims.")
    if ".migrations." not in info.name
)


def _path(module: str) -> Path:
    relative = Path(*module.split(".")[1:])
    package = PACKAGE / relative / "__init__.py"
    return package if package.exists() else (PACKAGE / relative).with_suffix(".py")


def _imported(module: str) -> set[str]:
    """The package's modules that ``module`` imports, anywhere in its text."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(_path(module).read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(name for name in names if name in MODULES and name != module)
    # A package's __init__ is not a dependency worth a cycle.
    return {name for name in found if not module.startswith(f"{name}.")}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            if found := visit(imported, [*path, module]):
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        if found := visit(module, []):
            return found
    return None


def test_no_module_imports_one_that_imports_it_back():
    graph = {module: _imported(module) for module in MODULES}
    assert _cycle(graph) is None


def test_a_cycle_would_be_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


# One interpreter with Django and the libraries loaded but none of the
# package, forked once per module: each child sets Django up and imports
# that module first.
_IMPORT_EACH_FIRST = """
import contextlib, importlib, os, sys, traceback
import django

for library in ("django.urls", "django.test", "django.core.management", "django.db.models",
                "health_check.checks", "prometheus_client", "cronsim", "environ"):
    with contextlib.suppress(Exception):  # An optional library not installed.
        importlib.import_module(library)
assert not any(name.startswith("jobclaims") for name in sys.modules)

failed = []
for module in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            django.setup()
            __import__(module)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]):
        failed.append(module)
print(" ".join(failed))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child per module")
def test_each_module_imports_first_in_a_fresh_interpreter():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_FIRST, *MODULES],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [], result.stderr
