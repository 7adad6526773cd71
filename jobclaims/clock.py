"""The database's clock: the one clock every host that claims a job agrees on.

Hosts' own clocks drift and jump, so every moment a claim is compared with
(expiry, takeover, the window a run falls in) is read from the database.
"""

from __future__ import annotations

import datetime

from django.db import connections
from django.db.models import DateTimeField, Func


class DatabaseNow(Func):
    """The database's current time in UTC, evaluated per statement.

    Django's ``Now()`` is close but not enough: on MySQL and MariaDB it renders
    ``CURRENT_TIMESTAMP``, which is the *session's local time*, while Django
    stores datetimes in UTC. On PostgreSQL it renders ``STATEMENT_TIMESTAMP()``,
    which is right, and on SQLite ``STRFTIME(..., 'now')``, which is UTC.
    """

    template = "CURRENT_TIMESTAMP"
    output_field = DateTimeField()

    def as_postgresql(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, template="STATEMENT_TIMESTAMP()", **extra_context)

    def as_mysql(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra_context)

    def as_sqlite(self, compiler, connection, **extra_context):
        return self.as_sql(
            compiler,
            connection,
            template="STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f', 'NOW')",
            **extra_context,
        )


def database_now(using: str = "default") -> datetime.datetime:
    """Return the database's current time as an aware UTC datetime."""
    connection = connections[using]
    compiler = connection.ops.compiler("SQLCompiler")(None, connection, using)
    sql, params = compiler.compile(DatabaseNow())
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        (value,) = cursor.fetchone()
    if isinstance(value, str):  # SQLite has no datetime type.
        value = datetime.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value
