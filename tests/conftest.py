"""Shared pytest configuration: anyio on asyncio for every async test, well-formed requests."""

from __future__ import annotations

import pytest

# Imported so pytest finds the autouse fixture for every test of the suite.
from .support.well_formed import every_request_is_one_openai_accepts  # noqa: F401


@pytest.fixture
def anyio_backend() -> str:
    """Run anyio tests on asyncio (the backend the library targets)."""
    return "asyncio"
