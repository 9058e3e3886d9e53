"""Times as the CLI shows them: with their date and zone (local, or UTC with ``--utc``), spans
of time as people say them (``4m 05s``), wakes relative to now, and ``--since`` values."""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime, timedelta

from ..spec._durations import parse_duration


def show_time(when: datetime, *, utc: bool = False) -> str:
    """``2026-12-01 16:05:00 +00:00``: the time in this machine's zone, or in UTC."""
    shown = when.astimezone(UTC) if utc else when.astimezone()
    offset = shown.strftime("%z")  # +0530; the colon makes it read as an offset
    return f"{shown:%Y-%m-%d %H:%M:%S} {offset[:3]}:{offset[3:]}"


def show_span(seconds: float) -> str:
    """A length of time in its two largest units: ``12s``, ``4m 05s``, ``1h 30m``, ``2d 3h``."""
    total = max(int(seconds), 0)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def show_wake(when: datetime, now: datetime, *, utc: bool = False) -> str:
    """A wake time relative to now, then absolute: ``in 5m 00s (2026-12-01 16:05:00 +00:00)``,
    or ``due (...)`` once it has passed."""
    left = math.ceil((when - now).total_seconds())  # 0.4 s ahead is "in 1s", not "in 0s"
    relative = f"in {show_span(left)}" if left > 0 else "due"
    return f"{relative} ({show_time(when, utc=utc)})"


def since_arg(text: str) -> timedelta | datetime:
    """An argparse ``type=`` for ``--since``: a duration back from now (``1h``, ``30m``, ``2d``)
    or an ISO date or time (``2026-12-01``, ``2026-12-01T16:00``; local unless it names its
    zone)."""
    try:
        return timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (1h, 30m, 2d) nor an ISO date (2026-12-01)"
        ) from None
    return when if when.tzinfo is not None else when.astimezone()


def cutoff(since: timedelta | datetime, now: datetime) -> datetime:
    """The earliest time ``--since`` keeps."""
    return now - since if isinstance(since, timedelta) else since
