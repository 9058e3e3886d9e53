"""Durations as people write them, in specs and flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from autonomous.spec._durations import parse_duration

from .conftest import cli


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("1.5", 1.5),
        (30, 30.0),
        (0.25, 0.25),
        ("30s", 30.0),
        ("30m", 1800.0),
        ("1h", 3600.0),
        ("2d", 172800.0),
        ("1w", 604800.0),
        ("1h30m", 5400.0),
        (" 1H 30M ", 5400.0),
        ("0.5h", 1800.0),
    ],
)
def test_durations_people_write(text: str | float, seconds: float) -> None:
    """Seconds, and numbers with s, m, h, d, w units, alone or combined."""
    assert seconds == parse_duration(text)


@pytest.mark.parametrize("text", ["", "h", "1x", "1h-", "ten", "1h 2q", "-"])
def test_bad_durations_name_the_text(text: str) -> None:
    """A bad duration is refused with the text and the accepted forms."""
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def test_a_boolean_is_not_a_duration() -> None:
    """``true`` in a spec is not one second."""
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(True)


def test_flags_take_durations(tmp_path: Path) -> None:
    """``daemon --poll 1m`` runs; ``--poll soon`` is a usage error naming the text."""
    assert 0 == cli(tmp_path, "daemon", "--once", "--poll", "1m").returncode
    bad = cli(tmp_path, "daemon", "--once", "--poll", "soon")
    assert 2 == bad.returncode and "'soon' is not a duration" in bad.stderr, bad.stderr
