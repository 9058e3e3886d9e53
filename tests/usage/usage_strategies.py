"""Hypothesis strategies shared by the usage tests."""

from __future__ import annotations

from hypothesis import strategies as st

from usage import Pricing, Usage

MAX_TOKENS = 10**9


@st.composite
def usages(draw: st.DrawFn) -> Usage:
    """A well-formed Usage: cache reads and writes are parts of the input tokens."""
    input_tokens = draw(st.integers(0, MAX_TOKENS))
    cached = draw(st.integers(0, input_tokens))
    written = draw(st.integers(0, input_tokens - cached))
    return Usage(input_tokens, draw(st.integers(0, MAX_TOKENS)), cached, written)


prices = st.floats(min_value=0.0, max_value=1000.0, allow_nan=False, allow_infinity=False)

pricings = st.builds(Pricing, prices, prices, prices, prices)

costs = st.floats(min_value=0.0, max_value=100.0, allow_nan=False, allow_infinity=False)

model_names = st.sampled_from(["gpt-4o-mini", "openai/gpt-4o", "claude-3-5-haiku", "local"])
