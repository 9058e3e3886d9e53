"""Fixtures and test prompters for the permissions tests."""

from __future__ import annotations

import pytest

from .permissions_helpers import RecordingPrompter


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio."""
    return "asyncio"


@pytest.fixture
def yes() -> RecordingPrompter:
    """A prompter that allows everything it is asked about."""
    return RecordingPrompter(True)


@pytest.fixture
def no() -> RecordingPrompter:
    """A prompter that denies everything it is asked about."""
    return RecordingPrompter(False)
