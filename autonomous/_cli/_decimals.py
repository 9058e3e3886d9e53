"""Numbers as the CLI shows them: dollar amounts without float noise, floats in positional
notation (``0.000027``, not ``2.7e-05``) in tables, JSON and the hooks' environment."""

from __future__ import annotations

import math
from decimal import Decimal

#: Dollar amounts are rounded to this many decimal places (a ten-billionth of a dollar) where
#: they are shown: the float noise of a sum (2.7000000000000002e-05) goes, every real cost stays.
USD_PLACES = 10


def usd(amount: float) -> float:
    """A dollar amount without float noise (rounded to :data:`USD_PLACES` places)."""
    return round(amount, USD_PLACES)


def decimal_text(number: float) -> str:
    """A float in positional notation, as short as its repr: ``0.000027``, not ``2.7e-05``
    (a magnitude of 1e16 or more, or one not finite, as its repr)."""
    text = repr(number)
    if "e" not in text or not math.isfinite(number) or abs(number) >= 1e16:
        return text
    return format(Decimal(text), "f")
