"""Names the claims tables cannot keep apart: MariaDB/MySQL's text columns.

A claim is unique on ``(job, window)``, so two names the table stores or
compares as one are one job. On MariaDB/MySQL a column can lose a character
beyond the Basic Multilingual Plane (4 bytes in UTF-8: emoji and others) in
two ways:

- ``utf8mb3`` (MySQL's old ``utf8``), which a table created under an old
  server default or converted by hand can be in, cannot store it. The
  ``INSERT IGNORE`` a claim starts with stores ``report_📈`` as ``report_?``
  and only warns, and the next plain ``INSERT`` of such a name fails.
- Older ``utf8mb4`` collations, such as ``utf8mb4_general_ci`` (MariaDB's
  default before 11.5) and ``utf8mb4_unicode_ci``, store it but compare every
  such character as equal: ``report_📈`` and ``report_📉`` would share claims,
  one job skipping because the other ran.

PostgreSQL and SQLite store and tell apart every character.
``JobRun.validate_claim()`` refuses a name with such a character where a
column would lose it, and check ``jobclaims.W003`` names the columns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

#: Character sets that store every character; the others (utf8mb3, latin1…)
#: cannot store those of 4 bytes.
WIDE = ("utf8mb4", "utf16", "utf16le", "utf32")

#: What turns a table into one that keeps every name apart. utf8mb4_unicode_520_ci
#: is on MariaDB and MySQL alike, and ignores case as the older defaults did.
CONVERSION = "CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_520_ci"

#: Two characters of 4 bytes that a collation able to tell them apart does.
_PAIR = ("\U0001f4c8", "\U0001f4c9")  # 📈 📉

#: Per database alias, the columns found, as {(table, column): why}. Read once
#: per process, on the first name that needs it: a job is a short process, and
#: a table converted meanwhile is seen by the next one. ``forget()`` clears it.
_lossy_by_alias: dict[str, dict[tuple[str, str], str]] = {}


def needs_four_bytes(text: str) -> str:
    """The first character of ``text`` beyond three bytes in UTF-8, or "".

    Every claim asks this of each of its names, and most names are ASCII,
    which ``str.isascii()`` tells without reading them in Python.
    """
    if text.isascii():
        return ""
    return next((char for char in text if ord(char) > 0xFFFF), "")


def lossy_columns(
    connection: BaseDatabaseWrapper, tables: Iterable[str]
) -> dict[tuple[str, str], str]:
    """The text columns of ``tables`` that lose 4-byte characters, and why.

    Keyed by (table, column); the value says what is wrong, for a message:
    ``"is in utf8mb3, which cannot store them"``. Only MariaDB/MySQL have
    per-column character sets and collations; elsewhere none.
    """
    if connection.vendor != "mysql":
        return {}
    tables = list(tables)
    placeholders = ", ".join(["%s"] * len(tables))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, character_set_name, collation_name "
            "FROM information_schema.columns WHERE table_schema = DATABASE() "
            f"AND table_name IN ({placeholders}) AND collation_name IS NOT NULL",
            tables,
        )
        columns = cursor.fetchall()
        lossy = {}
        merging: dict[str, bool] = {}
        for table, column, charset, collation in columns:
            if charset not in WIDE:
                lossy[(table, column)] = f"is in {charset}, which cannot store them"
                continue
            if charset != "utf8mb4":
                continue
            if collation not in merging:
                merging[collation] = _merges_four_byte_characters(cursor, collation)
            if merging[collation]:
                lossy[(table, column)] = f"compares them all as one ({collation})"
        return lossy


def _merges_four_byte_characters(cursor: CursorWrapper, collation: str) -> bool:
    # A collation's name cannot be a parameter; this one was read from the
    # server's own catalogue, and is checked to be a bare name all the same.
    if not collation.replace("_", "").isalnum():
        raise ValueError(f"unexpected collation name {collation!r}")
    cursor.execute(f"SELECT CONVERT(%s USING utf8mb4) COLLATE {collation} = %s", _PAIR)
    row = cursor.fetchone()
    return bool(row and row[0])


def cached_lossy_columns(
    connection: BaseDatabaseWrapper, tables: Iterable[str]
) -> dict[tuple[str, str], str]:
    """``lossy_columns()``, read once per process and database alias."""
    if connection.alias not in _lossy_by_alias:
        _lossy_by_alias[connection.alias] = lossy_columns(connection, tables)
    return _lossy_by_alias[connection.alias]


def forget() -> None:
    """Read the columns again at the next claim that needs them."""
    _lossy_by_alias.clear()


def refuse_lossy(connection: BaseDatabaseWrapper, tables: Iterable[str], **values: str) -> None:
    """Refuse a 4-byte character where a column would store it as "?" or
    take it for any other, naming the conversion that fixes the table.

    Only a name with such a character asks the database, once per process.
    """
    wide = {name: char for name, value in values.items() if (char := needs_four_bytes(value))}
    if not wide:
        return
    lossy = cached_lossy_columns(connection, tables)
    for name, char in wide.items():
        for (table, column), why in sorted(lossy.items()):
            if column == name:
                raise ValueError(
                    f"{name} {values[name]!r} has {char!r}, a character of 4 bytes, and "
                    f"the {table}.{column} column {why}; convert the table with "
                    f"ALTER TABLE {table} {CONVERSION}, or leave the character out"
                )
