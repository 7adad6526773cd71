"""The database's clock: the one clock every host that claims a job agrees on.

Hosts' own clocks drift and jump, so every moment a claim is compared with
(expiry, takeover, the window a run falls in) is read from the database.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.db.models import DateTimeField, Func
from django.db.models.sql import Query

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType


class DatabaseNow(Func):
    """The database's current time in UTC, evaluated per statement.

    Django's ``Now()`` is close but not enough: on MySQL and MariaDB it renders
    ``CURRENT_TIMESTAMP``, which is the *session's local time*, while Django
    stores datetimes in UTC. On PostgreSQL it renders ``STATEMENT_TIMESTAMP()``,
    which is right, and on SQLite ``STRFTIME(..., 'now')``, which is UTC.
    """

    template = "CURRENT_TIMESTAMP"
    output_field = DateTimeField()

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> _AsSqlType:
        return self.as_sql(compiler, connection, template="STATEMENT_TIMESTAMP()", **extra_context)

    def as_mysql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> _AsSqlType:
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra_context)

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> _AsSqlType:
        return self.as_sql(
            compiler,
            connection,
            template="STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f', 'NOW')",
            **extra_context,
        )


def database_now(using: str = "default") -> datetime.datetime:
    """Return the database's current time as an aware UTC datetime."""
    connection = connections[using]
    # A lone expression compiles against an empty query, as Django's schema
    # editor compiles a field's db_default.
    compiler = Query(None).get_compiler(using=using)
    sql, params = compiler.compile(DatabaseNow())
    value: datetime.datetime | str
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        (value,) = cursor.fetchone()
    if isinstance(value, str):  # SQLite has no datetime type.
        value = datetime.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value
