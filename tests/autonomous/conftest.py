"""Fixtures for the autonomous tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autonomous.testing._server import ScriptedServer


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio."""
    return "asyncio"


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    """A fresh scripted OpenAI-compatible server on 127.0.0.1 (starting one takes milliseconds)."""
    with ScriptedServer() as server:
        yield server
