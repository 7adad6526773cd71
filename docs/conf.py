"""Sphinx configuration: the documentation site, built from these markdown
files with MyST, and the API reference from the docstrings with autodoc.

``make docs`` builds it with warnings as errors and nitpicky references, so
a broken link, a missing page or an unknown cross-reference fails the build.
"""

from __future__ import annotations

import sys
from pathlib import Path

import django
from django.conf import settings

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]

# autodoc imports the models and commands: a minimal project, no database used.
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "jobclaims"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
)
django.setup()

project = "jobclaims"
author = "jobclaims contributors"
copyright = "jobclaims contributors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "jobclaims_reference",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# "checks.md#jobclaims-e002-…" links resolve to headings, and are checked.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

nitpicky = True
# Names the signatures mention that have no page of their own to link to.
nitpick_ignore_regex = [
    ("py:class", r"(django|datetime|collections|contextlib|typing|argparse)\..*"),
    # The internal modules' classes: documented where the public face shows them.
    ("py:class", r"jobclaims\.(time|running|jobs|controls|monitoring)\..*"),
    # A model, named by the module that defines it: the page names it jobclaims.models.X.
    ("py:class", r"jobclaims\.models\.\w+\.\w+"),
    ("py:class", r"~?(P|R|P\.args|P\.kwargs|Literal\[.*\]|WindowSpec)"),
    ("py:class", r"jobclaims\.jobs\.claiming\.[PR]"),
    # The pipe that holds Instances at the start: internal to jobclaims.testing.
    ("py:class", r"StartingLine"),
    ("py:class", r"(Any|Callable|Iterator|CommandParser|_ParamSpec.*)"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# A parameter is listed where its docstring says what it is for (":param"):
# a list of bare names and types tells a reader nothing the signature does not.
autodoc_typehints_description_target = "documented"
autodoc_default_options = {"members": True}

# Furo: a readable sidebar, dark mode and a search box, as modern Django
# packages' sites have.
html_theme = "furo"
html_title = "jobclaims"
