"""Where the documentation lives, for the messages that send a user there.

The site is built from docs/ (``make docs``) and published at ``DOCS_URL``.
A page's address is its markdown file's path with ``.html`` for ``.md``; a
heading's anchor is its text in lower case, each run of other characters
made one "-" (``jobclaims.E002: claims would go to a replica`` is
``jobclaims-e002-claims-would-go-to-a-replica``). Messages name pages
through ``page()`` only, with literal arguments, so tests/test_documentation.py
can hold every address the code gives to a page and heading that exist:
a wheel ships no docs/ folder to point to.
"""

from __future__ import annotations

#: The site's root, for the release users run.
DOCS_URL = "https://jobclaims.readthedocs.io/en/stable/"


def page(path: str, anchor: str = "") -> str:
    """The address of the page built from ``docs/<path>.md``, at ``anchor``."""
    address = f"{DOCS_URL}{path}.html"
    return f"{address}#{anchor}" if anchor else address
