"""What a claim may ask for: names the table can store, and a lease it can keep.

Checked before any statement: MariaDB's ``INSERT IGNORE`` would cut an
overlong value short instead of refusing it, a name a column would store
as another (``jobclaims.claims.charsets``) would share another job's claims, and
a lease past ``leases.MAX_LEASE`` can end where no database keeps a date,
and ``naming.ALL_JOBS`` names a pause of all jobs, never a job.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db import connections, models

from jobclaims.claims import charsets, naming
from jobclaims.conf import jobclaims_settings
from jobclaims.time import leases


def validate(
    runs: type[models.Model],
    skips: type[models.Model],
    job: str,
    window: str,
    lease: datetime.timedelta,
    schedule: str = "",
    owner: str = "",
) -> None:
    """Refuse a claim that the ``runs`` table (and its ``skips``) could not
    store, with a ``ValueError`` naming the fix."""
    names = {"job": job, "window": window, "schedule": schedule}
    if owner:  # Not named: the claim records this process, whose name fits.
        names["owner"] = owner
    for name, value in names.items():
        _refuse_what_the_column_refuses(runs._meta.get_field(name), name, value)
    if job == naming.ALL_JOBS:
        raise ValueError(
            f"job {job!r} is no job's name: it names all jobs in a pause of them all; "
            "give the job a name of its own"
        )
    if job.startswith(naming.TAG_MARK):
        raise ValueError(
            f"job {job!r} starts with {naming.TAG_MARK!r}, which names the pause of a tag; "
            "give the job a name that does not"
        )
    connection = connections[jobclaims_settings.claims_database(runs)]
    tables = [runs._meta.db_table, skips._meta.db_table]
    charsets.refuse_lossy(connection, tables, job=job, window=window, schedule=schedule)
    if problem := leases.problem(lease):
        raise ValueError(f"lease {problem}")


def _refuse_what_the_column_refuses(field: Any, name: str, value: str) -> None:
    # These are CharFields: each has a max_length.
    assert isinstance(field, models.CharField)
    assert field.max_length is not None
    limit = field.max_length
    if not value and not field.blank:
        raise ValueError(f"a claim needs a {name} name")
    if len(value) > limit:
        raise ValueError(
            f"{name} {value!r} is {len(value)} characters long; shorten it to at most {limit}"
        )
    if "\x00" in value:  # PostgreSQL refuses it in text; others would cut the name there.
        raise ValueError(f"{name} {value!r} contains a NUL character; remove it")
