"""The transaction an operator's change is made in: its write lock comes first.

SQLite begins a transaction deferred: its first read fixes what it sees,
and once another connection has committed after that read, its first
write fails at once with "database is locked" (the busy timeout is not
waited: waiting could not make the read current). An operator's change
reads before it writes (the admin checks a form, an action reads the rows
it will log), and on a host whose schedulers commit claims every few
seconds such a change failed now and then. Its lock taken first, the
change waits for the claims' commits as any writer does, then reads what
they left. PostgreSQL and MariaDB lock rows, not the database: there the
transaction is ``atomic()``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from jobclaims.claims import retries
from jobclaims.models import JobRun


@contextmanager
def write_first(using: str) -> Iterator[None]:
    """``transaction.atomic(using=using)``, holding SQLite's write lock from
    its first statement. Inside a transaction that has read already, it is
    too late: make the change's outermost transaction with this.

    A wait for the lock that outlasts the busy timeout is tried again, as
    a claim's is (``retries.RETRY_FOR``): a host's claims may hold the lock
    one after another for longer, and the change has read nothing yet.
    """
    connection = connections[using]
    if connection.vendor != "sqlite":
        with transaction.atomic(using=using):
            yield
        return
    with retries.retrying(connection, lambda: _locked(connection)):
        yield


def _locked(connection: BaseDatabaseWrapper) -> ExitStack:
    """A transaction begun on ``connection`` that holds the write lock; one
    whose lock wait ran out is rolled back, and its error raised."""
    with ExitStack() as begun:
        begun.enter_context(transaction.atomic(using=connection.alias))
        # A write takes the lock even when it matches no row.
        table = connection.ops.quote_name(JobRun._meta.db_table)
        column = connection.ops.quote_name(JobRun._meta.pk.column)
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET {column} = {column} WHERE 0")
        return begun.pop_all()
