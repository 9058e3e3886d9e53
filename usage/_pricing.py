"""Pricing: USD per million tokens, and the cost of a Usage under it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from ._errors import UnknownModel
from ._usage import Usage

_PER_MTOK = 1_000_000.0

# litellm's per-token price fields, by the Pricing field they feed.
_TABLE_FIELDS = {
    "input_per_mtok": "input_cost_per_token",
    "output_per_mtok": "output_cost_per_token",
    "cached_input_per_mtok": "cache_read_input_token_cost",
}


def _non_negative_finite(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            f"Pricing.{attribute.name} must be a finite number >= 0 (USD per million tokens), "
            f"got {value!r}"
        )


@attrs.frozen
class Pricing:
    """Prices in USD per million tokens; ``cost(usage)`` turns a Usage into dollars.

    The billing rule: ``usage.cached_input_tokens`` is the part of ``usage.input_tokens`` that
    was served from the provider's prompt cache (as litellm reports it: its ``prompt_tokens``
    include ``prompt_tokens_details.cached_tokens``). Those tokens cost
    ``cached_input_per_mtok``; the other input tokens cost ``input_per_mtok``; output tokens
    cost ``output_per_mtok``. When ``cached_input_per_mtok`` is 0 the model has no cache
    discount, and cached tokens are billed at the input price. Cached tokens beyond
    ``input_tokens`` (inconsistent data) are not billed twice: at most ``input_tokens`` tokens
    count as cached.
    """

    input_per_mtok: float = attrs.field(
        default=0.0, converter=float, validator=_non_negative_finite
    )
    output_per_mtok: float = attrs.field(
        default=0.0, converter=float, validator=_non_negative_finite
    )
    cached_input_per_mtok: float = attrs.field(
        default=0.0, converter=float, validator=_non_negative_finite
    )

    @property
    def is_zero(self) -> bool:
        """True when every price is zero, so every cost is zero (no pricing configured)."""
        prices = (self.input_per_mtok, self.output_per_mtok, self.cached_input_per_mtok)
        return not any(prices)

    def cost(self, usage: Usage) -> float:
        """Return the USD cost of ``usage`` under these prices (see the class docstring)."""
        cached = min(max(usage.cached_input_tokens, 0), max(usage.input_tokens, 0))
        uncached = max(usage.input_tokens, 0) - cached
        cached_price = self.cached_input_per_mtok or self.input_per_mtok
        total = (
            uncached * self.input_per_mtok
            + cached * cached_price
            + max(usage.output_tokens, 0) * self.output_per_mtok
        )
        return total / _PER_MTOK

    @classmethod
    def for_model(cls, name: str) -> Pricing:
        """Return the prices litellm's bundled price table lists for the model ``name``.

        ``name`` may carry a provider prefix: the full name is tried first, then the part after
        the first ``/`` (``"openai/gpt-4o-mini"`` finds ``"gpt-4o-mini"``). Raises
        ``UnknownModel`` when neither is in the table or the entry has no per-token prices.
        The first call imports litellm (slow, a few seconds; no network call is made).
        """
        from ._litellm_prices import model_cost_table  # lazy: keeps litellm unimported

        entry = _find_entry(model_cost_table(), name)
        prices = {field: _per_token(entry, key, name) for field, key in _TABLE_FIELDS.items()}
        if prices["input_per_mtok"] is None and prices["output_per_mtok"] is None:
            raise UnknownModel(name, "litellm's price table lists no per-token prices for it")
        return cls(**{field: (value or 0.0) * _PER_MTOK for field, value in prices.items()})


def _find_entry(table: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    candidates = [name]
    if "/" in name:
        candidates.append(name.split("/", 1)[1])
    for candidate in candidates:
        entry = table.get(candidate) if candidate else None
        if isinstance(entry, Mapping):
            return entry
    raise UnknownModel(name)


def _per_token(entry: Mapping[str, Any], key: str, name: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UnknownModel(name, f"litellm's price table has a non-numeric {key}: {value!r}")
    if not math.isfinite(value) or value < 0:
        raise UnknownModel(name, f"litellm's price table has an invalid {key}: {value!r}")
    return float(value)
