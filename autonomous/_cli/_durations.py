"""Durations as command-line arguments (``--every 30m``), parsed as spec files write them."""

from __future__ import annotations

import argparse

from ..spec._durations import parse_duration


def duration_arg(text: str) -> float:
    """An argparse ``type=`` for durations: a bad one is a usage error naming the text."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
