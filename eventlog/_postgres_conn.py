"""PostgresEventLog's connections: the DSN shown without its password, server errors turned
into ours, and the first connection that creates (or checks) the schema."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg_pool

from . import _postgres_sql as sql
from ._errors import StoreUnavailable

#: What a failed call to the server raises: psycopg's errors and the pool's.
ERRORS = (psycopg.Error, psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)

_PASSWORD_PARAM = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def mask_dsn(dsn: str) -> str:
    """``dsn`` with its password (in a URL or a ``password=`` parameter) shown as ``***``."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        if parts.password is not None:
            user = parts.username or ""
            host = parts.netloc.rpartition("@")[2]
            parts = parts._replace(netloc=f"{user}:***@{host}")
        dsn = urlunsplit(parts)
    return _PASSWORD_PARAM.sub(r"\1***", dsn)


def unavailable(masked: str, what: str, exc: BaseException) -> StoreUnavailable:
    """The error for a server error ``exc`` met while doing ``what`` with the log at ``masked``."""
    detail = str(exc).strip() or type(exc).__name__
    if isinstance(exc, psycopg_pool.PoolTimeout):
        detail = f"no connection to the server within the timeout ({detail})"
    return StoreUnavailable(f"event log {masked}: cannot {what}: {detail}")


def version_problem(masked: str, found: str) -> str:
    """Why the log at ``masked``, of store version ``found``, cannot be used."""
    problem = (
        f"event log {masked} has store schema version {found}, this code reads"
        f" version {sql.STORE_VERSION}"
    )
    if found.isdigit() and int(found) > sql.STORE_VERSION:
        return problem + "; upgrade the library"
    return problem


async def set_up(conn: psycopg.AsyncConnection[tuple[object, ...]], masked: str) -> str:
    """Create the tables if the schema has none, migrate older ones; the schema's name.

    Raises :class:`StoreUnavailable` for a schema of another store version (a newer one is
    never touched). Creation and migration hold an advisory lock, so that two processes
    opening a new schema at once do not race.
    """
    cur = await conn.execute(sql.HAS_META)
    found = await cur.fetchone()
    assert found is not None  # a SELECT of constants has its row
    has_meta, schema = found
    if schema is None:
        raise StoreUnavailable(f"event log {masked}: no schema on the search_path exists")
    if not has_meta or await _version(conn) in sql.MIGRATIONS:
        async with conn.transaction():
            await conn.execute(sql.SETUP_LOCK)
            if await _version(conn, missing_ok=True) == "none":  # nobody made them meanwhile
                for statement in sql.SCHEMA:
                    await conn.execute(statement)
            while (steps := sql.MIGRATIONS.get(await _version(conn))) is not None:
                for statement in steps:
                    await conn.execute(statement)
    version = await _version(conn)
    if version != str(sql.STORE_VERSION):
        raise StoreUnavailable(version_problem(masked, version))
    return str(schema)


async def _version(
    conn: psycopg.AsyncConnection[tuple[object, ...]], *, missing_ok: bool = False
) -> str:
    """The store version the schema says it has (``"none"``: no tables, with ``missing_ok``)."""
    if missing_ok:
        cur = await conn.execute(sql.HAS_META)
        found = await cur.fetchone()
        if found is None or not found[0]:
            return "none"
    cur = await conn.execute(sql.GET_VERSION)
    row = await cur.fetchone()
    return "none" if row is None else str(row[0])
