"""Fixtures for the autonomous tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from autonomous.testing._server import ScriptedServer
from eventlog import SessionRef

from .stores import DurableStore


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio."""
    return "asyncio"


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    """A fresh scripted OpenAI-compatible server on 127.0.0.1 (starting one takes milliseconds)."""
    with ScriptedServer() as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> DurableStore:
    """A fresh, empty durable store: a SQLite file, or a PostgreSQL schema of its own (the
    ``pg_dsn`` fixture). Every test that takes it runs once on each store."""
    if request.param == "sqlite":
        return DurableStore("sqlite", str(tmp_path / "runs.db"))
    return DurableStore("postgres", request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def durable_ref(durable: DurableStore) -> AsyncIterator[SessionRef]:
    """A session on a log opened on ``durable`` (closed after the test)."""
    async with durable.open() as log:
        yield SessionRef(log, "test", "tester", "s1")
