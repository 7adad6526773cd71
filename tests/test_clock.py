"""The database clock that every claim is judged by."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.utils import timezone

from jobclaims.clock import database_now


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
