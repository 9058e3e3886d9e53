"""Times as the CLI shows them: date and zone, spans, wakes relative to now, --since values."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from autonomous._cli._times import cutoff, show_span, show_time, show_wake, since_arg

NOW = datetime(2026, 12, 1, 16, 0, tzinfo=UTC)
INDIA = timezone(timedelta(hours=5, minutes=30))


@pytest.fixture
def in_india(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's local zone is UTC+05:30 for the test."""
    monkeypatch.setenv("TZ", "IST-05:30")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


class TestShowTime:
    @pytest.mark.usefixtures("in_india")
    def test_local_by_default_with_date_and_zone(self) -> None:
        """A UTC time is shown in the local zone, with its date and offset."""
        assert "2026-12-01 21:30:00 +05:30" == show_time(NOW)

    @pytest.mark.usefixtures("in_india")
    def test_utc_on_request(self) -> None:
        """With utc, any time is shown in UTC."""
        assert "2026-12-01 16:00:00 +00:00" == show_time(NOW.astimezone(INDIA), utc=True)


class TestShowSpan:
    @pytest.mark.parametrize(
        ("expected", "seconds"),
        [("0s", 0), ("12s", 12.9), ("4m 05s", 245), ("1h 30m", 5400), ("2d 3h", 183600)],
    )
    def test_the_two_largest_units(self, expected: str, seconds: float) -> None:
        """A span shows its two largest units, seconds and minutes padded."""
        assert expected == show_span(seconds)


class TestShowWake:
    def test_a_wake_ahead_is_relative_then_absolute(self) -> None:
        """A wake in five minutes reads 'in 5m 00s' and then the time."""
        wake = NOW + timedelta(minutes=5)
        assert "in 5m 00s (2026-12-01 16:05:00 +00:00)" == show_wake(wake, NOW, utc=True)

    def test_a_wake_that_passed_is_due(self) -> None:
        """A wake time in the past (or this second) reads 'due'."""
        wake = NOW - timedelta(minutes=1)
        assert "due (2026-12-01 15:59:00 +00:00)" == show_wake(wake, NOW, utc=True)


class TestSince:
    def test_a_duration_is_back_from_now(self) -> None:
        """'2h' keeps what happened in the last two hours."""
        assert NOW - timedelta(hours=2) == cutoff(since_arg("2h"), NOW)

    def test_an_iso_date_with_a_zone_is_taken_as_it_is(self) -> None:
        """An ISO time that names its zone is that instant."""
        assert NOW == cutoff(since_arg("2026-12-01T21:30+05:30"), NOW - timedelta(days=9))

    @pytest.mark.usefixtures("in_india")
    def test_an_iso_date_without_a_zone_is_local(self) -> None:
        """A bare date is midnight in the local zone."""
        assert datetime(2026, 12, 1, tzinfo=INDIA) == since_arg("2026-12-01")

    def test_anything_else_is_a_usage_error(self) -> None:
        """Text that is neither names both accepted forms."""
        with pytest.raises(argparse.ArgumentTypeError, match="neither a duration"):
            since_arg("yesterday")
