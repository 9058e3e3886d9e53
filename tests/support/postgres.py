"""A fresh PostgreSQL schema per test on the machine's server, and the rule that CI never skips.

The server is the one `.ci/run` starts (socket or 127.0.0.1:5432, trust auth, database ``test``);
``AUTONOMOUS_TEST_PG`` names another. Each test gets a schema of its own (dropped afterwards),
reached through a DSN whose ``options`` set ``search_path``, so tests never see each other's
tables or notifications.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from urllib.parse import quote

import pytest

#: The server the tests use, unless AUTONOMOUS_TEST_PG names another.
DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"


def server_dsn() -> str:
    """The DSN of the test server (no schema chosen)."""
    return os.environ.get("AUTONOMOUS_TEST_PG", DEFAULT_DSN)


def _connect_or_skip(dsn: str) -> object:
    """A sync connection to the server; skips the test off CI when there is none, fails on CI."""
    try:
        import psycopg
    except ImportError as exc:  # the [postgres] extra is part of [dev]
        if os.environ.get("CI"):
            raise
        pytest.skip(f"psycopg is not installed ({exc}): pip install -e '.[dev]'")
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):  # CI runs the server: a missing one is a failure, never a skip
            raise
        pytest.skip(f"no PostgreSQL server at {dsn}: {exc}")


def with_schema(dsn: str, schema: str) -> str:
    """``dsn`` with its ``search_path`` set to ``schema``."""
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    """A DSN whose connections use a fresh, empty schema of their own; dropped after the test."""
    import psycopg

    base = server_dsn()
    schema = f"t_{secrets.token_hex(6)}"
    conn = _connect_or_skip(base)
    assert isinstance(conn, psycopg.Connection)
    with conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield with_schema(base, schema)
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def wait_blocked_by(dsn: str, blocker: int) -> None:
    """Return once some backend waits for a lock that backend ``blocker`` holds (thirty
    seconds at most): a statement of the code under test is stuck behind it."""
    import anyio
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as look:
        with anyio.fail_after(30):
            while True:
                cur = await look.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    (blocker,),
                )
                row = await cur.fetchone()
                if row is not None and row[0]:
                    return
                await anyio.sleep(0.01)
