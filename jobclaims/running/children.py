"""What a process jobclaims starts takes up from its parent: settings, databases, a claim.

Three parents start children that must work on the very databases they use:
the scheduler starts a won fire's job under its claim, and the admin's "Run
now" does the same without watching the child
(``jobclaims.scheduling.launch``); the job's process then adopts that claim
instead of claiming again (``adopt()``). The race kit (``jobclaims.testing``)
starts instances of a command (``child_environment()``, ``connect_child()``).

Under a test runner those databases are test databases that the settings do
not name, so the parent passes their names on in an environment variable
and the child points its connections at them (``use_parents_databases()``),
never writing into ``django.conf.settings``: settings are only read.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import TYPE_CHECKING, cast

from django.conf import ENVIRONMENT_VARIABLE, settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from jobclaims.claims import retries
from jobclaims.conf import jobclaims_settings

if TYPE_CHECKING:
    from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteWrapper

    from jobclaims.models import JobRun

#: The databases a process passes on to the processes it starts, by alias.
DATABASE_NAMES_VARIABLE = "JOBCLAIMS_DATABASE_NAMES"


def database_names() -> dict[str, str]:
    """This process's database names by alias, for ``DATABASE_NAMES_VARIABLE``."""
    return {alias: str(connections[alias].settings_dict["NAME"]) for alias in connections}


def passed_on() -> dict[str, str]:
    """Our settings, import path and databases, wherever the child starts from."""
    return {
        # Under override_settings (a live test server's) SETTINGS_MODULE
        # reads None: the variable Django was set up from still names it.
        ENVIRONMENT_VARIABLE: settings.SETTINGS_MODULE or os.environ.get(ENVIRONMENT_VARIABLE, ""),
        "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),
        DATABASE_NAMES_VARIABLE: json.dumps(database_names()),
    }


def child_environment() -> dict[str, str]:
    """Point a child process at our settings and the very databases we use."""
    for alias in connections:
        connection = connections[alias]
        # The vendor names SQLite's wrapper; the cast tells mypy so.
        if connection.vendor == "sqlite" and cast("SQLiteWrapper", connection).is_in_memory_db():
            raise ImproperlyConfigured(
                f"the {alias!r} database is an in-memory SQLite database, which "
                "other processes cannot open; give it a file: set "
                f"DATABASES[{alias!r}]['TEST'] = {{'NAME': 'test.sqlite3'}}"
            )
    return passed_on()


def use_parents_databases() -> None:
    """Open the very databases the parent process uses, if it named them.

    A scheduler's job and a raced instance must claim where their parent
    does. Under a test runner that is a test database that the settings do
    not name, so the parent passes the names on (``database_names()``).

    The names go into the connection handler's own copy of ``DATABASES``,
    which Django shares with the settings until then: every connection
    opened from here on, in any thread (a heartbeat opens its own), opens
    the parent's database, and the settings stay as the project wrote them.
    Call it before any other thread connects.
    """
    names = os.environ.get(DATABASE_NAMES_VARIABLE)
    parents = cast("dict[str, str]", json.loads(names) if names else {})
    moved = {
        alias: name
        for alias, name in parents.items()
        if connections.settings[alias]["NAME"] != name
    }
    if not moved:
        return
    connections.settings = {
        alias: {**database, "NAME": moved.get(alias, database["NAME"])}
        for alias, database in connections.settings.items()
    }
    for alias in moved:
        # This thread's connection was made from the settings' dict: the
        # next one is made from the copy.
        connections[alias].close()
        del connections[alias]


def connect_child() -> None:
    """In a child process: set Django up on the parent's databases."""
    import django

    django.setup()
    use_parents_databases()
    for alias in connections:
        connections[alias].ensure_connection()


def adopt(job: str, window: str, token: str) -> JobRun | None:
    """The claim on ``job``'s ``window`` with ``token``, if it is still held.

    The scheduler claims a fire in its own process and starts the job's
    process only when it won; that process runs under the claim from here on
    (its heartbeat renews it, its outcome releases it) instead of claiming
    again. One indexed read.
    """
    # Imported here: the race kit imports this module before Django's apps are ready.
    from jobclaims.models import JobRun

    db = jobclaims_settings.claims_database(JobRun)
    try:
        held = uuid.UUID(token)
    except ValueError:
        return None
    held_run = JobRun.objects.active().filter(job=job, window=window, token=held)
    # Started in a crowd (every job due at one fire), the read may meet a
    # busy database: it asks for another try, as a claim would.
    return retries.retrying(connections[db], held_run.first)
