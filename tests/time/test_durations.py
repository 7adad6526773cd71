"""How operators' ages are read and spans of time are written back."""

from __future__ import annotations

import argparse
import datetime

import pytest

from jobclaims.time.durations import age, relative, short

NOW = datetime.datetime(2026, 11, 29, 10, 0, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", datetime.timedelta(days=30)),
        ("12h", datetime.timedelta(hours=12)),
        ("90m", datetime.timedelta(minutes=90)),
        (" 7d ", datetime.timedelta(days=7)),
    ],
)
def test_an_age_is_a_whole_number_and_a_unit(text, expected):
    assert age(text) == expected


@pytest.mark.parametrize("text", ["30", "30x", "0d", "-5d", "1.5h", "d", "30 d", ""])
def test_an_age_it_cannot_read_is_refused_with_the_format_to_use(text):
    with pytest.raises(argparse.ArgumentTypeError, match="like 30d, 12h or 90m"):
        age(text)


def test_an_age_of_a_century_is_the_longest_accepted():
    assert age("36525d") == datetime.timedelta(days=36525)
    assert age("876600h") == datetime.timedelta(days=36525)


@pytest.mark.parametrize(
    "text", ["36526d", "876601h", "52596001m", "999999999d", "99999999999999h", "9" * 40 + "d"]
)
def test_an_age_longer_than_a_century_is_refused_naming_the_longest(text):
    with pytest.raises(argparse.ArgumentTypeError, match="longer than the 36525 days"):
        age(text)


@pytest.mark.parametrize(
    ("seconds", "parts", "expected"),
    [
        (0, 1, "0 s"),
        (45, 1, "45 s"),
        (95, 2, "1 min 35 s"),
        (95, 1, "1 min"),
        (3 * 3600 + 5 * 60 + 9, 2, "3 h 5 min"),
        (3600 + 9, 2, "1 h"),
        (2 * 86400 + 3600, 2, "2 d 1 h"),
    ],
)
def test_a_span_is_written_in_its_largest_units_rounded_down(seconds, parts, expected):
    assert short(datetime.timedelta(seconds=seconds), parts) == expected


def test_a_moment_is_written_relative_to_now():
    minutes = datetime.timedelta(minutes=4, seconds=30)
    assert relative(NOW + minutes, NOW) == "in 4 min"
    assert relative(NOW - datetime.timedelta(hours=2, minutes=59), NOW) == "2 h ago"
    assert relative(NOW + datetime.timedelta(milliseconds=300), NOW) == "now"
