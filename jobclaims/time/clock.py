"""The database's clock: the one clock every host that claims a job agrees on.

Hosts' own clocks drift and jump, so every moment a claim is compared with
(expiry, takeover, the window a run falls in) is read from the database.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import connections
from django.db.models import BigIntegerField, DateTimeField, Func
from django.db.models.sql import Query

from jobclaims.time import leases

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType


#: SQLite has no datetime type: it keeps the text Django writes.
SQLITE_FORMAT = "%Y-%m-%d %H:%M:%f"


def sqlite_stamp(pattern: str, *modifiers: str) -> str:
    """SQLite's time now, moved by ``modifiers``, as the text Django writes.

    SQLite compares datetimes as text. Django writes a datetime as ``str()``
    does: microseconds in six digits, or none when they are zero, while
    ``%f`` gives milliseconds in three, so 12:00:00.123 would sort before
    the same moment written by Django, 12:00:00.123000. Padded, and without
    a zero fraction, the two are one string. ``pattern`` is ``SQLITE_FORMAT``
    escaped for where the SQL goes; SQLite's 'now' is one moment throughout
    a statement.
    """
    now = ", ".join(["'NOW'", *modifiers])
    return f"REPLACE(STRFTIME('{pattern}', {now}) || '000', '.000000', '')"


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
        # Escaped twice: once for the template, once for the query's params.
        template = sqlite_stamp(SQLITE_FORMAT.replace("%", "%%%%"))
        return self.as_sql(compiler, connection, template=template, **extra_context)


#: The moment ``EpochMicroseconds`` counts from.
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class EpochMicroseconds(Func):
    """A datetime as whole microseconds since 1970 in UTC: exact on every
    database, and read back as an int.

    For reads of many datetimes at once (health's per-job aggregates): a
    driver makes an int of a number for a fraction of what a datetime costs
    it (Django's psycopg loader takes microseconds for each), and
    ``from_epoch_microseconds()`` makes the datetime back, equal to the one
    stored, for comparisons and lookups.
    """

    arity = 1
    output_field = BigIntegerField()

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> _AsSqlType:
        # EXTRACT gives an exact numeric (PostgreSQL 14 on), which rounds to the microsecond.
        template = "(EXTRACT(EPOCH FROM %(expressions)s) * 1000000)::bigint"
        return self.as_sql(compiler, connection, template=template, **extra_context)

    def as_mysql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> _AsSqlType:
        # Arithmetic on the stored UTC value: UNIX_TIMESTAMP() would read it in
        # the session's time zone.
        template = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', %(expressions)s)"
        return self.as_sql(compiler, connection, template=template, **extra_context)

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> _AsSqlType:
        # The text Django stores: its whole seconds by STRFTIME (which would
        # round .999999 up), then the six digits of the fraction, or none
        # when it is zero.
        sql, params = compiler.compile(self.source_expressions[0])
        return (
            f"(CAST(STRFTIME('%%s', SUBSTR({sql}, 1, 19)) AS INTEGER) * 1000000"
            f" + CAST(SUBSTR({sql} || '.000000', 21, 6) AS INTEGER))",
            (*params, *params),
        )


def from_epoch_microseconds(value: int | None) -> datetime.datetime | None:
    """The aware UTC datetime ``EpochMicroseconds`` read, or None for NULL.

    Through a float, which holds every microsecond to the year 2255 within
    half of one (fromtimestamp() rounds to the nearest): twice as fast as
    adding a timedelta, and as exact.
    """
    if value is None:
        return None
    return datetime.datetime.fromtimestamp(value / 1_000_000, datetime.timezone.utc)


def now_sql(connection: BaseDatabaseWrapper) -> str:
    """``DatabaseNow`` as SQL for ``connection``, for statements written out.

    A lone expression compiles against an empty query, as Django's schema
    editor compiles a field's db_default. It takes no parameters; its
    percent signs are escaped for a statement that has some.
    """
    sql, _params = Query(None).get_compiler(connection=connection).compile(DatabaseNow())
    return str(sql)


def database_now(using: str = "default") -> datetime.datetime:
    """Return the database's current time as an aware UTC datetime."""
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {now_sql(connection)}", [])
        (value,) = cursor.fetchone()
    return as_utc(value)


def dates_in(connection: BaseDatabaseWrapper, zone: str) -> bool:
    """Whether ``connection`` can turn moments into dates in ``zone`` in SQL
    (``QuerySet.dates()``, which an admin's date hierarchy lists): in its
    own zone always; in another only where the server has its time-zone
    tables. MariaDB/MySQL's ``CONVERT_TZ`` returns NULL without them, and
    Django then fails with "Database returned an invalid datetime value";
    PostgreSQL and SQLite carry their own (Django's
    ``has_zoneinfo_database``)."""
    return zone == connection.timezone_name or connection.features.has_zoneinfo_database


#: How long a reading of the database clock is carried forward on this
#: host's monotonic clock (``leases.clock()``) before it is read again.
CARRIED_FOR = 60.0
#: How fast the database's clock and this host's monotonic clock may drift
#: apart, as a share of the time carried: NTP slews each by at most 500
#: parts per million and never steps a monotonic clock, so twice that.
DRIFT = 0.001


class Reading(NamedTuple):
    """The database's time, and when on ``leases.clock()`` the read of it was
    sent and answered: the server read its clock somewhere in between."""

    at: datetime.datetime
    sent: float
    answered: float

    def bounds(self, now: float) -> tuple[datetime.datetime, datetime.datetime] | None:
        """The earliest and the latest the database's time can be at ``now``
        on ``leases.clock()``; ``None`` once the reading is too old to carry."""
        carried = now - self.sent
        if not 0 <= carried <= CARRIED_FOR:
            return None
        drift = carried * DRIFT
        earliest = self.at + datetime.timedelta(seconds=now - self.answered - drift)
        latest = self.at + datetime.timedelta(seconds=carried + drift)
        return earliest, latest


#: Each database's latest reading in this process, by alias.
_readings: dict[str, Reading] = {}


def read_database_now(using: str = "default") -> datetime.datetime:
    """``database_now()``, kept as the reading ``carried_database_now()`` carries forward."""
    sent = leases.clock()
    now = database_now(using)
    _readings[using] = Reading(now, sent, leases.clock())
    return now


def carried_database_now(
    using: str = "default",
) -> tuple[datetime.datetime, datetime.datetime] | None:
    """The earliest and the latest the database's time can be now, by its
    last reading (``read_database_now()``) carried forward; ``None`` with no
    reading of the last ``CARRIED_FOR`` seconds.

    The two are one round trip and the clocks' drift apart: a caller that
    finds the same answer at both (the key of the slot due now, away from
    the slot's edges) has the one a read would have given, without the read.
    """
    reading = _readings.get(using)
    return None if reading is None else reading.bounds(leases.clock())


def as_utc(value: datetime.datetime | str) -> datetime.datetime:
    """A datetime the database returned, as an aware UTC datetime.

    PostgreSQL returns aware datetimes, MySQL naive ones in UTC (Django
    stores UTC), and SQLite the text Django stored.
    """
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value
