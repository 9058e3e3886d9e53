"""Fixtures for the eventlog tests: a settable clock and each store, fresh per test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from eventlog import EventLog, MemoryEventLog, PostgresEventLog, SqliteEventLog


class FakeClock:
    """A UTC clock that only moves when a test says so."""

    def __init__(self, start: datetime = datetime(2030, 1, 1, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio (aiosqlite needs it)."""
    return "asyncio"


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock every store of the test reads."""
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where a test's SQLite event log lives."""
    return tmp_path / "events.db"


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(
    request: pytest.FixtureRequest, db_path: Path, clock: FakeClock
) -> AsyncIterator[EventLog]:
    """Each store in turn, open, on the fake clock (Postgres in a fresh schema of its own)."""
    log: MemoryEventLog | SqliteEventLog | PostgresEventLog
    if request.param == "memory":
        log = MemoryEventLog(clock=clock)
    elif request.param == "sqlite":
        log = SqliteEventLog(db_path, clock=clock)
    else:
        log = PostgresEventLog(request.getfixturevalue("pg_dsn"), clock=clock, max_size=4)
    async with log:
        yield log


@pytest.fixture(scope="session")
def dead_pid() -> int:
    """The pid of a process of this host that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def zombie() -> Iterator[int]:
    """The pid of a child that has exited and is not reaped yet (a zombie), reaped afterwards."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # Wait for the exit without reaping it (WNOWAIT): the child stays a zombie until wait().
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    try:
        yield child.pid
    finally:
        child.wait()
