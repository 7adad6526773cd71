"""Names the claims tables cannot keep apart: MariaDB/MySQL's text columns."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator

import pytest
from django.db import connection

from jobclaims import checks
from jobclaims.claims import charsets
from jobclaims.models import JobRun, JobSkip

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = datetime.timedelta(minutes=5)
TABLES = ("jobclaims_jobrun", "jobclaims_jobskip")


def table_collation(table: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_collation FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name = %s",
            [table],
        )
        [collation] = cursor.fetchone()
        return str(collation)


def convert(collation: str) -> None:
    charset = collation.split("_")[0]
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(
                f"ALTER TABLE {table} CONVERT TO CHARACTER SET {charset} COLLATE {collation}"
            )
    charsets.forget()


@pytest.fixture
def tables_in() -> Iterator[Callable[[str], None]]:
    """Convert the claims tables to a collation, as an older server made them;
    they are put back as they were after the test."""
    if connection.vendor != "mysql":
        pytest.skip("only MariaDB/MySQL keep a character set per table")
    was = table_collation(TABLES[0])
    try:
        yield convert
    finally:
        # Names the test's collation kept apart may collide in the old one.
        JobRun.objects.all().delete()
        JobSkip.objects.all().delete()
        convert(was)


LOSSY = [
    ("utf8mb3_general_ci", "is in utf8mb3, which cannot store them"),
    ("utf8mb4_general_ci", r"compares them all as one \(utf8mb4_general_ci\)"),
]


@pytest.mark.parametrize(("collation", "why"), LOSSY)
@pytest.mark.parametrize(
    ("job", "window", "refused"),
    [
        ("report_📈", "2026-11-29", "job 'report_📈' has '📈', a character of 4 bytes, and"),
        ("report", "2026-11-29 📈", "window '2026-11-29 📈' has '📈', a character of 4 bytes"),
    ],
)
def test_a_name_with_a_4_byte_character_is_refused_where_a_column_loses_it_and_nothing_is_written(
    tables_in, collation, why, job, window, refused
):
    tables_in(collation)
    with pytest.raises(ValueError, match=f"{refused}.* column {why}") as error:
        JobRun.objects.claim(job, window, lease=LEASE)
    assert (
        "ALTER TABLE jobclaims_jobrun CONVERT TO CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_unicode_520_ci, or leave the character out"
    ) in str(error.value)
    assert not JobRun.objects.exists()
    assert not JobSkip.objects.exists()


def test_a_name_of_characters_up_to_3_bytes_is_claimed_on_a_utf8mb3_table(tables_in):
    tables_in("utf8mb3_general_ci")
    run = JobRun.objects.claim("rapport_été_报告", "2026-11-29", lease=LEASE)
    assert run is not None
    assert JobRun.objects.get().job == "rapport_été_报告"


@pytest.mark.parametrize(("collation", "why"), LOSSY)
def test_columns_that_lose_4_byte_characters_are_warning_w003_naming_the_conversion(
    tables_in, collation, why
):
    tables_in(collation)
    [warning] = checks.check_column_charsets(databases=["default"])
    assert warning.id == "jobclaims.W003"
    assert "jobclaims_jobrun.job " in warning.msg
    assert "jobclaims_jobskip.window " in warning.msg
    assert (warning.hint or "").startswith(
        "Convert the tables: "
        "ALTER TABLE jobclaims_jobrun CONVERT TO CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_unicode_520_ci; "
        "ALTER TABLE jobclaims_jobskip CONVERT TO CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_unicode_520_ci. See https://"
    )


def test_w003_is_left_to_the_checks_that_name_a_database():
    assert checks.check_column_charsets() == []


@pytest.fixture
def tables_that_keep_every_name_apart(request) -> None:
    """The claims tables as W003's hint leaves them, where tables have a collation."""
    if connection.vendor == "mysql":
        request.getfixturevalue("tables_in")("utf8mb4_unicode_520_ci")


@pytest.mark.usefixtures("tables_that_keep_every_name_apart")
def test_tables_that_keep_every_name_apart_pass_w003():
    assert checks.check_column_charsets(databases=["default"]) == []


@pytest.mark.usefixtures("tables_that_keep_every_name_apart")
def test_two_jobs_whose_names_differ_by_an_emoji_are_two_jobs():
    rising = JobRun.objects.claim("report_📈", "2026-11-29", lease=LEASE)
    falling = JobRun.objects.claim("report_📉", "2026-11-29", lease=LEASE)
    assert rising is not None
    assert falling is not None
    assert sorted(JobRun.objects.values_list("job", flat=True)) == ["report_📈", "report_📉"]
