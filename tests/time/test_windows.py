"""How a moment maps to a window key, in the project's time zone."""

from __future__ import annotations

import datetime

import pytest
from django.test import override_settings
from django.utils import timezone

from jobclaims.time import windows

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
        (datetime.timedelta(minutes=15), "2026-11-29T10:15+00:00"),
    ],
)
def test_a_moment_falls_in_the_window_that_contains_it(spec, key):
    assert windows.resolve(spec).key_at(at("2026-11-29T10:25:41.500+00:00")) == key


@override_settings(TIME_ZONE="Pacific/Auckland")
def test_calendar_windows_follow_the_project_time_zone():
    moment = at("2026-11-29T20:30:00+00:00")
    assert windows.resolve("daily").key_at(moment) == "2026-11-30"
    assert windows.resolve("hourly").key_at(moment) == "2026-11-30T09:00+13:00"


@override_settings(TIME_ZONE="Pacific/Auckland")
@pytest.mark.parametrize(
    "spec", ["minutely", "hourly", "daily", "weekly", "monthly", datetime.timedelta(hours=1)]
)
def test_a_zone_a_request_activated_keys_no_window_of_its_own(spec):
    """TIME_ZONE keys the windows, not a user's zone a middleware activated."""
    window = windows.resolve(spec)
    moment = at("2026-11-29T20:30:00+00:00")
    in_time_zone = (window.key_at(moment), window.key_for("2026-11-30T09:30"))
    with timezone.override("America/Los_Angeles"):
        assert (window.key_at(moment), window.key_for("2026-11-30T09:30")) == in_time_zone
        assert window.start_of(in_time_zone[0]) <= moment


@override_settings(TIME_ZONE="America/New_York")
def test_the_repeated_hour_of_a_daylight_saving_change_is_two_windows():
    hourly = windows.resolve("hourly")
    first = hourly.key_at(at("2026-11-01T05:30:00+00:00"))
    second = hourly.key_at(at("2026-11-01T06:30:00+00:00"))
    assert (first, second) == ("2026-11-01T01:00-04:00", "2026-11-01T01:00-05:00")


@override_settings(TIME_ZONE="Asia/Kolkata")
def test_fixed_windows_are_the_same_on_every_host_whatever_its_time_zone():
    bucket = windows.resolve(datetime.timedelta(hours=1))
    assert bucket.key_at(at("2026-11-29T10:25:00+00:00")) == "2026-11-29T15:30+05:30"


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
        (datetime.timedelta(minutes=15), "2026-11-29T10:29", "2026-11-29T10:15+00:00"),
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


# Daylight-saving changes in New York, 2026: at 02:00 on 8 March the clocks
# skip to 03:00, so 02:30 never happens; at 02:00 on 1 November they go back
# to 01:00, so 01:30 happens twice (first in daylight time, -04:00).
NEW_YORK = override_settings(TIME_ZONE="America/New_York")
EVERY_SPEC = [
    "minutely",
    "hourly",
    "daily",
    "weekly",
    "monthly",
    datetime.timedelta(minutes=15),
    datetime.timedelta(hours=1),
    datetime.timedelta(minutes=7),
]


@NEW_YORK
@pytest.mark.parametrize("spec", EVERY_SPEC)
@pytest.mark.parametrize(
    ("text", "instant"),
    [
        # Skipped: read with the offset before the change, 03:30 daylight time.
        ("2026-03-08T02:30", "2026-03-08T07:30+00:00"),
        ("2026-03-08T02:00", "2026-03-08T07:00+00:00"),
        # Repeated: its first occurrence, in daylight time.
        ("2026-11-01T01:30", "2026-11-01T05:30+00:00"),
        # The second occurrence, named by its offset.
        ("2026-11-01T01:30-05:00", "2026-11-01T06:30+00:00"),
    ],
)
def test_a_local_time_that_is_skipped_or_repeated_gets_the_key_of_the_instant_it_names(
    spec, text, instant
):
    window = windows.resolve(spec)
    assert window.key_for(text) == window.key_at(at(instant))


@NEW_YORK
@pytest.mark.parametrize("spec", EVERY_SPEC)
def test_a_skipped_wall_time_given_as_a_datetime_gets_the_key_of_its_instant(spec):
    window = windows.resolve(spec)
    skipped = timezone.make_aware(datetime.datetime(2026, 3, 8, 2, 30))
    assert window.key_at(skipped) == window.key_at(at("2026-03-08T07:30:00+00:00"))


@NEW_YORK
def test_the_hour_cron_runs_at_2_30_on_a_spring_forward_night_is_the_scheduled_3_00_window():
    hourly = windows.resolve("hourly")
    assert hourly.key_for("2026-03-08T02:30") == "2026-03-08T03:00-04:00"


@NEW_YORK
@pytest.mark.parametrize(
    ("day", "hours"),
    [(datetime.date(2026, 3, 8), 23), (datetime.date(2026, 11, 1), 25)],
)
@pytest.mark.parametrize(
    ("spec", "windows_per_hour", "windows_per_day"),
    [
        ("minutely", 60, None),
        ("hourly", 1, None),
        (datetime.timedelta(minutes=15), 4, None),
        (datetime.timedelta(hours=1), 1, None),
        ("daily", None, 1),
    ],
)
def test_keys_between_lists_each_real_window_of_a_dst_day_once(
    day, hours, spec, windows_per_hour, windows_per_day
):
    window = windows.resolve(spec)
    midnight = datetime.datetime.combine(day, datetime.time())
    start = timezone.make_aware(midnight)
    end = timezone.make_aware(midnight + datetime.timedelta(days=1))
    keys = window.keys_between(start, end)
    assert len(keys) == len(set(keys)) == (windows_per_day or hours * windows_per_hour)
    every_minute = [
        start.astimezone(UTC) + datetime.timedelta(minutes=n) for n in range(hours * 60)
    ]
    assert keys == list(dict.fromkeys(window.key_at(moment) for moment in every_minute))


@NEW_YORK
@pytest.mark.parametrize(
    ("spec", "start", "end", "keys"),
    [
        ("weekly", "2026-03-02", "2026-03-16", ["2026-W10", "2026-W11"]),
        ("weekly", "2026-10-26", "2026-11-09", ["2026-W44", "2026-W45"]),
        ("monthly", "2026-03-01", "2026-04-01", ["2026-03"]),
        ("monthly", "2026-11-01", "2026-12-01", ["2026-11"]),
    ],
)
def test_keys_between_lists_a_week_or_month_with_a_dst_change_once(spec, start, end, keys):
    local_midnight = [timezone.make_aware(at(f"{day}T00:00")) for day in (start, end)]
    assert windows.resolve(spec).keys_between(*local_midnight) == keys


@NEW_YORK
@pytest.mark.parametrize("spec", EVERY_SPEC)
@pytest.mark.parametrize("day", ["2026-03-08", "2026-11-01"])
def test_every_wall_time_of_a_dst_day_names_a_window_the_schedule_lists(spec, day):
    window = windows.resolve(spec)
    middle = at(f"{day}T12:00").replace(tzinfo=UTC)
    reach = max(2 * window.longest, datetime.timedelta(days=2))
    keys = set(window.keys_between(middle - reach, middle + reach))
    for minute in range(0, 24 * 60, 10):
        text = f"{day}T{minute // 60:02d}:{minute % 60:02d}"
        assert window.key_for(text) in keys, text


@pytest.mark.parametrize(
    "spec",
    [
        datetime.timedelta(milliseconds=500),
        datetime.timedelta(seconds=1.5),
        datetime.timedelta(minutes=1, microseconds=1),
        datetime.timedelta(0),
        datetime.timedelta(seconds=-60),
    ],
)
def test_a_fixed_window_its_key_cannot_name_exactly_is_refused_naming_the_fix(spec):
    with pytest.raises(ValueError, match=r"must be a whole number of seconds, at least 1, like"):
        windows.resolve(spec)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("0-second", "must be a whole number of seconds"),
        ("-5-second", "names no window"),
        ("1.5-second", "names no window"),
        ("x-second", "names no window"),
        ("9" * 25 + "-second", "names no window"),
        ("yearly", "unknown window"),
    ],
)
def test_a_recorded_schedule_that_names_no_window_is_refused(name, message):
    with pytest.raises(ValueError, match=message):
        windows.from_name(name)


@pytest.mark.parametrize("spec", [*windows.CALENDAR_NAMES, datetime.timedelta(seconds=90)])
def test_a_windows_recorded_name_reads_back_as_the_same_window(spec):
    window = windows.resolve(spec)
    assert windows.from_name(window.name) == window


def test_the_longest_fixed_window_a_timedelta_holds_reads_back_from_its_name():
    longest = datetime.timedelta.max // windows.SECOND * windows.SECOND
    assert windows.from_name(windows.resolve(longest).name) == windows.FixedWindow(longest)


@NEW_YORK
@pytest.mark.parametrize(
    ("name", "key", "start"),
    [
        ("minutely", "2026-11-29T10:25-05:00", "2026-11-29T10:25-05:00"),
        ("hourly", "2026-11-01T01:00-05:00", "2026-11-01T06:00+00:00"),
        ("daily", "2026-11-29", "2026-11-29T05:00+00:00"),
        ("weekly", "2026-W48", "2026-11-23T05:00+00:00"),
        ("monthly", "2026-07", "2026-07-01T04:00+00:00"),
    ],
)
def test_a_calendar_window_starts_where_its_key_says_in_time_zone(name, key, start):
    window = windows.resolve(name)
    assert window.start_of(key) == at(start)
    assert window.key_at(window.start_of(key)) == key


def test_a_fixed_window_starts_at_the_moment_its_key_names():
    window = windows.resolve(datetime.timedelta(seconds=90))
    key = window.key_at(at("2026-11-29T10:01:40+00:00"))
    assert window.start_of(key) == at("2026-11-29T10:01:30+00:00")


def first_key_after(window: windows.CalendarWindow, key: str) -> str:
    """The key that follows ``key``, found the slow, sure way: stepping
    through UTC a quarter of an hour at a time (every offset, and every
    change of one, falls on a quarter hour) until the key changes."""
    moment = window.start_of(key).astimezone(datetime.timezone.utc)
    while window.key_at(moment) == key:
        moment += datetime.timedelta(minutes=15)
    return window.key_at(moment)


@pytest.mark.parametrize(
    "zone",
    # Midnights that are skipped (Santiago) or repeated (Havana), a skipped
    # day (Apia, 30 December 2011) and a half-hour change (Lord Howe).
    ["UTC", "America/Santiago", "America/Havana", "Pacific/Apia", "Australia/Lord_Howe"],
)
@pytest.mark.parametrize("name", ["daily", "weekly", "monthly"])
def test_a_day_week_or_month_ends_where_the_next_one_starts_through_every_dst_change(zone, name):
    window = windows.CalendarWindow(name)
    with override_settings(TIME_ZONE=zone):
        moment = datetime.datetime(2011, 1, 1, tzinfo=datetime.timezone.utc)
        last = datetime.datetime(2012, 1, 15, tzinfo=datetime.timezone.utc)
        keys = [key for _, key in window.through(moment, last)]
        for key in keys[:-1]:
            end = window.end_of(key, window.start_of(key))
            assert end == window.start_of(first_key_after(window, key)), (zone, key)
            # Through UTC: arithmetic on a local datetime is on its wall time.
            just_before = end.astimezone(datetime.timezone.utc) - datetime.timedelta(microseconds=1)
            assert window.key_at(just_before) == key, (zone, key)
