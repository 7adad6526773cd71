"""What the migrations do beyond Django's own operations.

Django's loader takes every module of this package whose name does not
start with an underscore for a migration; this one does.
"""

from typing import Any

from django.db import migrations
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


class _RunSQLOnOne(migrations.RunSQL):
    """``RunSQL`` sent only to the databases ``runs_on()`` names."""

    def database_forwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: Any, to_state: Any
    ) -> None:
        if self.runs_on(schema_editor.connection):
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: Any, to_state: Any
    ) -> None:
        if self.runs_on(schema_editor.connection):
            super().database_backwards(app_label, schema_editor, from_state, to_state)

    def runs_on(self, connection: BaseDatabaseWrapper) -> bool:
        raise NotImplementedError


class RunSQLOnPostgreSQL(_RunSQLOnOne):
    """``RunSQL`` sent to PostgreSQL alone."""

    def runs_on(self, connection: BaseDatabaseWrapper) -> bool:
        return connection.vendor == "postgresql"


class RunSQLOnMariaDB(_RunSQLOnOne):
    """``RunSQL`` sent to MariaDB alone: MySQL has none of its ``SET STATEMENT``."""

    def runs_on(self, connection: BaseDatabaseWrapper) -> bool:
        return connection.vendor == "mysql" and bool(getattr(connection, "mysql_is_mariadb", False))
