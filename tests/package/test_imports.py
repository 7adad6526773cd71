"""The package is stacked in layers that import only downwards, with no
cycle, and each module imports first.

The graph counts every import a module names, at its top, inside a function
or only for type checking: a cycle hidden in a function still ties two
modules together for a reader, and an import that climbs a layer, however
lazy, makes the lower layer depend on the upper (docs/architecture.md).
"""

from __future__ import annotations

import ast
import os
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import jobclaims
from tests.support.helpers import once_across_the_databases

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


#: The layers, bottom first: a module may import modules of its own layer
#: and of those below it, never of one above (docs/architecture.md).
LAYERS = (
    ("time", ["jobclaims.time"]),
    ("settings", ["jobclaims.conf", "jobclaims.signals"]),
    ("claims", ["jobclaims.claims", "jobclaims.exceptions"]),
    ("models", ["jobclaims.models", "jobclaims.migrations"]),
    ("running", ["jobclaims.running"]),
    ("jobs", ["jobclaims.jobs"]),
    ("controls", ["jobclaims.controls"]),
    ("scheduling", ["jobclaims.scheduling"]),
    ("monitoring", ["jobclaims.monitoring"]),
    ("admin", ["jobclaims.admin"]),
    ("contrib", ["jobclaims.contrib"]),
    ("checks", ["jobclaims.checks"]),
    ("management", ["jobclaims.management"]),
    (
        "face",
        [
            "jobclaims",
            "jobclaims.apps",
            "jobclaims.claiming",
            "jobclaims.commands",
            "jobclaims.pytest_plugin",
            "jobclaims.testing",
        ],
    ),
)

#: Every module the layers hold, migrations too.
EVERY_MODULE = [
    "jobclaims",
    *sorted(info.name for info in pkgutil.walk_packages([str(PACKAGE)], "jobclaims.")),
]


def layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of the layer that holds ``module``: the one
    naming it or the package nearest around it."""
    found = [
        (len(name), index)
        for index, (_, names) in enumerate(LAYERS)
        for name in names
        if module == name or module.startswith(f"{name}.")
    ]
    return max(found)[1] if found else None


def _names_imported(module: str) -> set[str]:
    """The package's modules that ``module`` imports, and the package's face
    (``jobclaims``) where it imports a name from it that is no module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(_path(module).read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in EVERY_MODULE else node.module)
    return {name for name in found if name in EVERY_MODULE and name != module}


def climbing_imports(graph: dict[str, set[str]], layer: Callable[[str], int | None]) -> list[str]:
    """Each import in ``graph`` from a module to one in a layer above its own."""
    return [
        f"{module} ({LAYERS[below][0]}) imports {imported} ({LAYERS[above][0]})"
        for module, imported_modules in sorted(graph.items())
        for imported in sorted(imported_modules)
        if (below := layer(module)) is not None
        and (above := layer(imported)) is not None
        and above > below
    ]


def test_every_module_is_in_a_layer():
    assert [module for module in EVERY_MODULE if layer_of(module) is None] == []


def test_no_import_climbs_a_layer():
    graph = {module: _names_imported(module) for module in EVERY_MODULE}
    assert climbing_imports(graph, layer_of) == []


def test_an_import_that_climbs_a_layer_would_be_found():
    graph = {"jobclaims.time.slots": {"jobclaims.claims.rule", "jobclaims.time.cron"}}
    assert climbing_imports(graph, layer_of) == [
        "jobclaims.time.slots (time) imports jobclaims.claims.rule (claims)"
    ]


def test_the_top_level_holds_at_most_a_dozen_modules_besides_its_subpackages():
    modules = [path.name for path in PACKAGE.glob("*.py")]
    assert len(modules) <= 12, sorted(modules)


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
    once_across_the_databases()  # Imports read no database: 30 s or more a run.
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
