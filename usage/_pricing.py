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
    "cache_creation_input_per_mtok": "cache_creation_input_token_cost",
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
    was read from the provider's prompt cache, ``usage.cache_creation_input_tokens`` the part
    written to it (as litellm reports them: its ``prompt_tokens`` include
    ``prompt_tokens_details.cached_tokens``, and for Anthropic ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` too). Cache reads cost ``cached_input_per_mtok`` (litellm's
    ``cache_read_input_token_cost``), cache writes ``cache_creation_input_per_mtok`` (its
    ``cache_creation_input_token_cost``; Anthropic charges a premium over input), the other
    input tokens ``input_per_mtok``, output tokens ``output_per_mtok``. A cache price of 0
    means the model has no such rate: those tokens are billed at the input price. Cache tokens
    beyond ``input_tokens`` (inconsistent data) are not billed twice: reads count first, then
    writes, up to ``input_tokens`` together.
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
    cache_creation_input_per_mtok: float = attrs.field(
        default=0.0, converter=float, validator=_non_negative_finite
    )

    @property
    def is_zero(self) -> bool:
        """True when every price is zero, so every cost is zero (no pricing configured)."""
        prices = (
            self.input_per_mtok,
            self.output_per_mtok,
            self.cached_input_per_mtok,
            self.cache_creation_input_per_mtok,
        )
        return not any(prices)

    def cost(self, usage: Usage) -> float:
        """Return the USD cost of ``usage`` under these prices (see the class docstring)."""
        total_input = max(usage.input_tokens, 0)
        cached = min(max(usage.cached_input_tokens, 0), total_input)
        written = min(max(usage.cache_creation_input_tokens, 0), total_input - cached)
        uncached = total_input - cached - written
        total = (
            uncached * self.input_per_mtok
            + cached * (self.cached_input_per_mtok or self.input_per_mtok)
            + written * (self.cache_creation_input_per_mtok or self.input_per_mtok)
            + max(usage.output_tokens, 0) * self.output_per_mtok
        )
        return total / _PER_MTOK

    def uncached_cost(self, input_tokens: int, output_tokens: int) -> float:
        """The most ``input_tokens`` and ``output_tokens`` can cost: no input read from a cache.

        Input is priced at the highest of its rates, the input rate unless a cache write costs
        a premium over it (Anthropic), so a budget check that uses this never underestimates a
        call, whatever part of its input the provider reads from or writes to its cache.
        """
        input_price = max(
            self.input_per_mtok, self.cached_input_per_mtok, self.cache_creation_input_per_mtok
        )
        total = max(input_tokens, 0) * input_price + max(output_tokens, 0) * self.output_per_mtok
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
