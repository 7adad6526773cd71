"""How a moment maps to a window key, in the project's time zone."""

from __future__ import annotations

import datetime

import pytest
from django.test import override_settings

from jobclaims import windows

UTC = datetime.timezone.utc


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ("minutely", "2026-11-29T10:25+00:00"),
        ("hourly", "2026-11-29T10:00+00:00"),
        ("daily", "2026-11-29"),
        ("weekly", "2026-W48"),
        ("monthly", "2026-11"),
        (datetime.timedelta(minutes=15), "2026-11-29T10:15:00+00:00"),
    ],
)
def test_a_moment_falls_in_the_window_that_contains_it(spec, key):
    assert windows.resolve(spec).key_at(at("2026-11-29T10:25:41.500+00:00")) == key


@override_settings(TIME_ZONE="Pacific/Auckland")
def test_calendar_windows_follow_the_project_time_zone():
    moment = at("2026-11-29T20:30:00+00:00")
    assert windows.resolve("daily").key_at(moment) == "2026-11-30"
    assert windows.resolve("hourly").key_at(moment) == "2026-11-30T09:00+13:00"


@override_settings(TIME_ZONE="America/New_York")
def test_the_repeated_hour_of_a_daylight_saving_change_is_two_windows():
    hourly = windows.resolve("hourly")
    first = hourly.key_at(at("2026-11-01T05:30:00+00:00"))
    second = hourly.key_at(at("2026-11-01T06:30:00+00:00"))
    assert (first, second) == ("2026-11-01T01:00-04:00", "2026-11-01T01:00-05:00")


@override_settings(TIME_ZONE="Asia/Kolkata")
def test_fixed_windows_are_the_same_on_every_host_whatever_its_time_zone():
    bucket = windows.resolve(datetime.timedelta(hours=1))
    assert bucket.key_at(at("2026-11-29T10:25:00+00:00")) == "2026-11-29T15:30:00+05:30"


@pytest.mark.parametrize(
    ("spec", "text", "key"),
    [
        ("daily", "2026-11-29", "2026-11-29"),
        ("daily", "2026-11-29T23:59", "2026-11-29"),
        ("hourly", "2026-11-29T10:25", "2026-11-29T10:00+00:00"),
        ("hourly", "2026-11-29T10:00+00:00", "2026-11-29T10:00+00:00"),
        ("hourly", "2026-11-29T10:25:41.5Z", "2026-11-29T10:00+00:00"),
        ("minutely", "2026-11-29T10:25:59", "2026-11-29T10:25+00:00"),
        ("weekly", "2026-W48", "2026-W48"),
        ("weekly", "2026-11-29", "2026-W48"),
        ("monthly", "2026-11", "2026-11"),
        (datetime.timedelta(minutes=15), "2026-11-29T10:29", "2026-11-29T10:15:00+00:00"),
    ],
)
def test_an_operators_window_is_normalised_to_the_key_a_scheduled_run_uses(spec, text, key):
    assert windows.resolve(spec).key_for(text) == key


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("daily", "yesterday"),
        ("hourly", "2026-11-29"),
        ("weekly", "2026-W60"),
        ("monthly", "2026-13"),
        (datetime.timedelta(minutes=5), "10:15"),
    ],
)
def test_a_window_that_does_not_parse_is_refused_with_an_example(spec, text):
    window = windows.resolve(spec)
    with pytest.raises(ValueError, match=f"is not a valid {window.name} window; write it like"):
        window.key_for(text)


@pytest.mark.parametrize("spec", ["hourl", "", datetime.timedelta(0), 3600])
def test_an_unknown_window_spec_names_the_choices(spec):
    with pytest.raises(ValueError, match="window"):
        windows.resolve(spec)
