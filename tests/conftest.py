"""Shared pytest configuration: anyio on asyncio for every async test, a guard that fails any
test whose event loop reported an exception or that left a coroutine never awaited, and one that
fails a test that sent a request OpenAI would refuse."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from .support.loop_guard import LoopGuard, unawaited_after_collection

# Imported so pytest finds them for every test of the suite: the autouse request check, and
# the fresh PostgreSQL schema of the postgres-marked tests.
from .support.postgres import pg_dsn  # noqa: F401
from .support.well_formed import every_request_is_one_openai_accepts  # noqa: F401

pytest_plugins = ["pytester"]  # tests/test_loop_guard.py runs the guard on failing tests


@pytest.fixture
def anyio_backend() -> str:
    """Run anyio tests on asyncio (the backend the library targets)."""
    return "asyncio"


@pytest.fixture(autouse=True)
def loop_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopGuard]:
    """Fail the test when any event loop's exception handler was called during it, or a
    coroutine it made was never awaited (garbage is collected first, so the warning fires
    inside the test that caused it)."""
    guard = LoopGuard()
    guard.install(monkeypatch)
    yield guard
    unawaited = unawaited_after_collection()
    # What outlived the test (imported libraries, caches) is hidden from later collections:
    # walking it after every test cost more than the tests themselves. A later test's
    # garbage is still all found; only a cycle among these survivors would go uncollected.
    gc.freeze()
    problems = [f"event loop reported: {m}" for m in guard.messages()]
    problems += [f"never awaited: {m}" for m in unawaited]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
