"""Fixtures of the fleet tests: the log (a SQLite file or a fresh PostgreSQL schema), an agent
directory, and the daemons a test starts (all SIGKILLed at its end if still running)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .daemons import Fleet


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """What ``--db`` takes: a SQLite file of the test, or a DSN of a fresh Postgres schema."""
    if request.param == "sqlite":
        return str(tmp_path / "fleet.db")
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    """The daemons' working directory: the spec, the brains module, the gate file."""
    directory = tmp_path / "agent"
    directory.mkdir()
    return directory


@pytest.fixture
def fleet(agent_dir: Path, db: str) -> Iterator[Fleet]:
    """Daemons over ``db``, started by the test, killed at its end."""
    started = Fleet(agent_dir, db)
    yield started
    started.close()
