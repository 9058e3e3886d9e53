"""The usage error tree.

UsageError
└── UnknownModel    litellm's price table has no usable entry for the model (LookupError)
"""

from __future__ import annotations


class UsageError(Exception):
    """Root of every error the usage package raises."""


class UnknownModel(UsageError, LookupError):
    """The price table has no usable per-token prices for the named model."""

    def __init__(self, model: str, detail: str = "not in litellm's price table") -> None:
        super().__init__(f"unknown model {model!r}: {detail}")
        self.model = model
