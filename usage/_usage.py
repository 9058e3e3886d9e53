"""Token counts of model calls, added up by operators."""

from __future__ import annotations

import attrs


@attrs.frozen
class Usage:
    """Tokens of one or more model calls; ``a + b`` adds them.

    ``input_tokens`` counts every prompt token, those read from the provider's prompt cache
    (``cached_input_tokens``) and those written to it (``cache_creation_input_tokens``, which
    only providers with explicit cache breakpoints, such as Anthropic, report) included.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens
