"""The migrations: one for 0.1.0, building the schema the chain it replaced built, and
none that the models need and the package lacks."""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection, migrations
from django.db.models.expressions import Expression
from django.test import override_settings

#: The migrations written while 0.1.0 was built, which 0001_initial replaced.
CHAIN_BEFORE_0_1 = "tests.models.migrations_before_0_1"

INITIAL = importlib.import_module("jobclaims.migrations.0001_initial")


@pytest.mark.django_db
def test_the_models_need_no_migration_that_is_not_shipped():
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_the_initial_migration_holds_the_schema_alone():
    """No RunPython, nor anything else that runs code: a later change to the
    package must not change what the migration does. It imports from
    jobclaims only the modules of its columns' database defaults, which the
    migration writer must name."""
    operations = INITIAL.Migration.operations
    assert {type(operation) for operation in operations} == {migrations.CreateModel}
    defaults = {
        type(field.db_default).__module__
        for operation in operations
        for _name, field in operation.fields
        if isinstance(field.db_default, Expression)
    }
    imported: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(INITIAL))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert {name for name in imported if name.startswith("jobclaims")} == defaults


@contextmanager
def migrated_by(module: str, *target: str) -> Iterator[None]:
    """jobclaims' tables as the migrations in ``module`` build them (up to
    ``target``, if given), dropped again on the way out, a failure included,
    while ``module`` still names what was applied."""
    with override_settings(MIGRATION_MODULES={"jobclaims": module}):
        try:
            call_command("migrate", "jobclaims", *target, verbosity=0)
            yield
        finally:
            call_command("migrate", "jobclaims", "zero", verbosity=0)


def declared_names() -> set[str]:
    """The names the models give their constraints and indexes."""
    return {
        item.name
        for model in apps.get_app_config("jobclaims").get_models()
        for item in (*model._meta.constraints, *model._meta.indexes)
    }


def schema() -> dict[str, Any]:
    """jobclaims' tables as the database describes them.

    Each column by name with all that the backend's introspection reports
    (type, null, default, size, collation, unsigned, ...); each constraint and
    index the models name, by that name; the others (primary keys, the checks
    of positive integer and JSON columns) as a sorted list of what they are.
    """
    introspection = connection.introspection
    declared = declared_names()
    tables: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for table in introspection.get_table_list(cursor):
            if not table.name.startswith("jobclaims_"):
                continue
            constraints = introspection.get_constraints(cursor, table.name)
            tables[table.name] = {
                "type": table.type,
                "columns": {
                    column.name: column._asdict()
                    for column in introspection.get_table_description(cursor, table.name)
                },
                "named": {name: found for name, found in constraints.items() if name in declared},
                "unnamed": sorted(
                    repr(sorted(found.items()))
                    for name, found in constraints.items()
                    if name not in declared
                ),
            }
    return tables


@pytest.mark.django_db(transaction=True)
def test_the_initial_migration_builds_the_schema_of_the_chain_it_replaced():
    """0001_initial builds what the chain before 0.1.0 built: the same tables,
    columns, indexes and constraints, as this database's introspection reads
    them (tests/models/migrations_before_0_1 holds the chain).

    Two things are compared loosely, because no code depends on them.
    Columns are compared by name, not position: the chain appended the
    columns it added to the end of their table, the one migration lists them
    in the models' order, and nothing reads a row by position. Constraints
    and indexes the models do not name (primary keys, the checks of positive
    integer and JSON columns) are compared by what they are, without their
    names: the database chooses those (jobclaims_jobrun_pkey on PostgreSQL,
    PRIMARY on MariaDB), and SQLite numbers them in the order of the
    columns, which differs. Those the models name are compared by name.
    """
    call_command("migrate", "jobclaims", "zero", verbosity=0)
    try:
        with migrated_by(CHAIN_BEFORE_0_1):
            before = schema()
        with migrated_by("jobclaims.migrations"):
            after = schema()
    finally:
        call_command("migrate", "jobclaims", verbosity=0)

    assert after == before
    assert {name for table in after.values() for name in table["named"]} == declared_names()
