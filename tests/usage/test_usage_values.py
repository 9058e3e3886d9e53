"""Usage: token counts added up by ``+``."""

from __future__ import annotations

from hypothesis import given

from usage import Usage

from .usage_strategies import usages


class TestUsage:
    """Usage values and their addition."""

    def test_defaults_are_zero(self) -> None:
        """A fresh Usage counts no tokens."""
        assert (0, 0, 0) == (
            Usage().input_tokens,
            Usage().output_tokens,
            Usage().cached_input_tokens,
        )

    def test_add_adds_each_field(self) -> None:
        """Adding two usages adds input, output, cache read and cache write tokens separately."""
        assert Usage(11, 22, 3, 5) == Usage(10, 20, 1, 4) + Usage(1, 2, 2, 1)

    def test_total_tokens(self) -> None:
        """total_tokens is input plus output."""
        assert 30 == Usage(10, 20, 5).total_tokens

    @given(usages(), usages(), usages())
    def test_addition_is_associative(self, a: Usage, b: Usage, c: Usage) -> None:
        """(a + b) + c equals a + (b + c)."""
        assert (a + b) + c == a + (b + c)

    @given(usages(), usages())
    def test_addition_is_commutative(self, a: Usage, b: Usage) -> None:
        """a + b equals b + a."""
        assert a + b == b + a

    @given(usages())
    def test_zero_is_the_identity(self, a: Usage) -> None:
        """Adding Usage() on either side changes nothing."""
        assert a == a + Usage() == Usage() + a
