"""Durations as people write them (``90``, ``1.5``, ``30s``, ``30m``, ``1h``, ``2d``, ``1h30m``)."""

from __future__ import annotations

import re

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str | int | float) -> float:
    """Seconds from a number of seconds or a duration such as ``30m``, ``1h`` or ``1h30m``.

    Raises :class:`ValueError` naming the text and the accepted forms.
    """
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, int | float):
        return float(text)
    flat = text.strip().lower().replace(" ", "")
    try:
        return float(flat)
    except ValueError:
        pass
    parts = _PART.findall(flat)
    if not flat or "".join(n + u for n, u in parts) != flat:
        raise ValueError(
            f"{text!r} is not a duration: give seconds or e.g. 30s, 30m, 1h, 2d, 1h30m"
        )
    return sum(float(number) * _UNITS[unit] for number, unit in parts)
