"""Pricing: validation, the cost rule and its arithmetic properties."""

from __future__ import annotations

import math

import attrs
import pytest
from hypothesis import given

from usage import Pricing, Usage

from .usage_strategies import pricings, usages


def close(expected: float, actual: float) -> bool:
    """Float equality for sums of products of money."""
    return math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-9)


class TestPricingConstruction:
    """Pricing accepts finite non-negative prices and nothing else."""

    def test_defaults_are_zero(self) -> None:
        """A default Pricing charges nothing."""
        assert Pricing(0.0, 0.0, 0.0) == Pricing()

    def test_ints_become_floats(self) -> None:
        """Integer prices are stored as floats."""
        assert 2.0 == Pricing(input_per_mtok=2).input_per_mtok
        assert isinstance(Pricing(input_per_mtok=2).input_per_mtok, float)

    @pytest.mark.parametrize(
        "field",
        [
            "input_per_mtok",
            "output_per_mtok",
            "cached_input_per_mtok",
            "cache_creation_input_per_mtok",
        ],
    )
    @pytest.mark.parametrize("bad", [-0.01, math.nan, math.inf, -math.inf])
    def test_rejects_negative_and_non_finite(self, field: str, bad: float) -> None:
        """A negative, NaN or infinite price is a ValueError naming the field."""
        with pytest.raises(ValueError, match=field):
            Pricing(**{field: bad})

    def test_is_frozen(self) -> None:
        """A Pricing cannot be changed after construction."""
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            Pricing().input_per_mtok = 1.0  # type: ignore[misc]

    def test_is_zero(self) -> None:
        """is_zero is true only when every price is zero."""
        assert (True, False, False, False) == (
            Pricing().is_zero,
            Pricing(output_per_mtok=0.1).is_zero,
            Pricing(cached_input_per_mtok=0.1).is_zero,
            Pricing(cache_creation_input_per_mtok=0.1).is_zero,
        )


class TestPricingCost:
    """Pricing.cost prices input, cached input and output tokens."""

    def test_prices_per_million_tokens(self) -> None:
        """One million input and one million output tokens cost the two prices."""
        assert close(3.0 + 15.0, Pricing(3.0, 15.0).cost(Usage(1_000_000, 1_000_000)))

    def test_cached_tokens_use_the_cached_price(self) -> None:
        """Cached tokens are the part of the input billed at the cached price."""
        pricing = Pricing(input_per_mtok=2.0, cached_input_per_mtok=0.5)
        assert close(0.6 * 2.0 + 0.4 * 0.5, pricing.cost(Usage(1_000_000, 0, 400_000)))

    def test_zero_cached_price_bills_cached_tokens_as_input(self) -> None:
        """With no cached price, cached tokens cost the input price."""
        assert close(2.0, Pricing(input_per_mtok=2.0).cost(Usage(1_000_000, 0, 400_000)))

    def test_cached_beyond_input_is_not_billed_twice(self) -> None:
        """Inconsistent data (more cached than input tokens) counts at most all input as cached."""
        pricing = Pricing(input_per_mtok=2.0, cached_input_per_mtok=0.5)
        assert close(0.5, pricing.cost(Usage(1_000_000, 0, 5_000_000)))

    def test_cache_writes_use_the_cache_creation_price(self) -> None:
        """Tokens written to the cache cost the creation price; reads and the rest their own."""
        pricing = Pricing(2.0, 0.0, 0.5, cache_creation_input_per_mtok=2.5)
        usage = Usage(
            1_000_000, 0, cached_input_tokens=200_000, cache_creation_input_tokens=300_000
        )
        assert close(0.5 * 2.0 + 0.2 * 0.5 + 0.3 * 2.5, pricing.cost(usage))

    def test_zero_creation_price_bills_writes_as_input(self) -> None:
        """A model with no cache-write rate bills written tokens at the input price."""
        usage = Usage(1_000_000, 0, cache_creation_input_tokens=300_000)
        assert close(2.0, Pricing(input_per_mtok=2.0).cost(usage))

    def test_reads_and_writes_beyond_input_are_not_billed_twice(self) -> None:
        """Reads count first, then writes, up to the input tokens together."""
        pricing = Pricing(2.0, 0.0, 0.5, cache_creation_input_per_mtok=2.5)
        usage = Usage(
            1_000_000, 0, cached_input_tokens=800_000, cache_creation_input_tokens=900_000
        )
        assert close(0.8 * 0.5 + 0.2 * 2.5, pricing.cost(usage))

    def test_uncached_cost_is_the_most_a_call_can_cost(self) -> None:
        """Input at the higher of the input and cache-write rates, output at the output rate."""
        assert close(
            1.0 * 2.5 + 0.5 * 8.0, Pricing(2.0, 8.0, 0.5, 2.5).uncached_cost(10**6, 5 * 10**5)
        )
        assert close(2.0, Pricing(2.0, 8.0, 0.5).uncached_cost(10**6, 0))

    @given(pricings, usages())
    def test_uncached_cost_bounds_the_cost(self, pricing: Pricing, a: Usage) -> None:
        """No usage costs more than its tokens at the uncached rates."""
        bound = pricing.uncached_cost(a.input_tokens, a.output_tokens)
        assert pricing.cost(a) <= bound * (1 + 1e-9) + 1e-12

    def test_zero_pricing_costs_nothing(self) -> None:
        """The default Pricing prices any usage at zero."""
        assert 0.0 == Pricing().cost(Usage(123, 456, 7))

    @given(pricings, usages(), usages())
    def test_cost_is_additive(self, pricing: Pricing, a: Usage, b: Usage) -> None:
        """The cost of a sum of usages is the sum of their costs."""
        assert close(pricing.cost(a) + pricing.cost(b), pricing.cost(a + b))

    @given(pricings, usages())
    def test_cost_is_non_negative(self, pricing: Pricing, a: Usage) -> None:
        """No usage has a negative cost."""
        assert pricing.cost(a) >= 0.0

    @given(pricings, usages(), usages())
    def test_more_usage_never_costs_less(self, pricing: Pricing, a: Usage, more: Usage) -> None:
        """Adding usage never lowers the cost."""
        assert pricing.cost(a + more) >= pricing.cost(a)

    @given(pricings, usages())
    def test_zero_usage_costs_nothing(self, pricing: Pricing, a: Usage) -> None:
        """Adding no usage adds no cost, and no usage costs nothing."""
        assert (0.0, pricing.cost(a)) == (pricing.cost(Usage()), pricing.cost(a + Usage()))
