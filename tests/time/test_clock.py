"""The database clock that every claim is judged by."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.db.models import Max
from django.utils import timezone

from jobclaims.models import JobRun, JobSkip
from jobclaims.time.clock import EpochMicroseconds, database_now, from_epoch_microseconds


@pytest.mark.django_db
def test_database_now_is_an_aware_utc_moment_close_to_this_hosts_clock():
    now = database_now()
    assert now.utcoffset() == datetime.timedelta(0)
    assert abs(now - timezone.now()) < datetime.timedelta(minutes=1)


@pytest.mark.django_db
def test_database_now_stays_utc_when_the_session_time_zone_is_not():
    if connection.vendor != "mysql":
        pytest.skip("only MySQL and MariaDB give sessions a time zone of their own")
    with connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+05:00'")
    try:
        assert abs(database_now() - timezone.now()) < datetime.timedelta(minutes=1)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET time_zone = 'SYSTEM'")


@pytest.mark.django_db
def test_a_moment_the_database_stamps_equals_the_same_moment_written_by_django():
    # A skip counts for a claim when skipped_at >= claimed_at. SQLite keeps
    # times as text and compares them as text, so a stamp of the database's
    # clock must be written as Django writes the same datetime, or a skip in
    # the claim's own millisecond would not count for it.
    run = JobRun.objects.claim("charge", "2026-11-29", lease=datetime.timedelta(minutes=5))
    assert run is not None
    skip = JobSkip.objects.create(job="charge", window="2026-11-29", owner="me", reason="held")
    skip.refresh_from_db()
    assert JobSkip.objects.filter(pk=skip.pk, skipped_at=skip.skipped_at).exists()
    assert JobRun.objects.filter(pk=run.pk, claimed_at=run.claimed_at).exists()
    assert JobRun.objects.filter(pk=run.pk, expires_at=run.expires_at).exists()


@pytest.mark.django_db
def test_a_moment_read_as_microseconds_comes_back_equal_to_the_one_stored():
    moments = [
        datetime.datetime(2026, 12, 5, 3, 0, tzinfo=datetime.timezone.utc),
        datetime.datetime(2026, 12, 5, 3, 0, 0, 1, tzinfo=datetime.timezone.utc),
        datetime.datetime(2026, 12, 5, 3, 0, 59, 999999, tzinfo=datetime.timezone.utc),
        datetime.datetime(1999, 12, 31, 23, 59, 59, 123456, tzinfo=datetime.timezone.utc),
        datetime.datetime(2199, 1, 1, 0, 0, 0, 500000, tzinfo=datetime.timezone.utc),
    ]
    for number, moment in enumerate(moments):
        JobRun.objects.create(job="read", window=str(number), claimed_at=moment, expires_at=moment)
    read = JobRun.objects.order_by("window").values_list(EpochMicroseconds("claimed_at"), flat=True)
    assert [from_epoch_microseconds(value) for value in read] == moments
    newest = JobRun.objects.aggregate(newest=EpochMicroseconds(Max("claimed_at")))["newest"]
    assert from_epoch_microseconds(newest) == moments[-1]
    # Read as microseconds, found again by a lookup of the datetime.
    assert JobRun.objects.filter(claimed_at=moments[-1]).count() == 1
    assert from_epoch_microseconds(newest) in list(
        JobRun.objects.values_list("claimed_at", flat=True)
    )
    # In any session time zone (MySQL and MariaDB give sessions one of their own).
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SET time_zone = '+05:00'")
        try:
            assert (
                from_epoch_microseconds(
                    JobRun.objects.aggregate(newest=EpochMicroseconds(Max("claimed_at")))["newest"]
                )
                == moments[-1]
            )
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET time_zone = 'SYSTEM'")
