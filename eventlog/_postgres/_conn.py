"""PostgresEventLog's connections: the DSN shown without its password, server errors turned
into ours, and the first connection that creates (or checks) the schema."""

from __future__ import annotations

import contextlib
import math
import re
import select
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from typing import Any, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg
import psycopg_pool
from psycopg import pq

from .._errors import StoreUnavailable
from .._events import SessionKey
from . import _sql as sql

#: What an operation was doing, for its error message: text, or a function that makes it
#: (built only when the operation fails, never on the hot path).
Action: TypeAlias = str | Callable[[], str]

Row: TypeAlias = tuple[Any, ...]
#: A statement's parameters: positional (``%s``) or named (``%(name)s``).
Params: TypeAlias = Sequence[Any] | Mapping[str, Any]


class Connection(psycopg.AsyncConnection[Row]):
    """A pooled connection that keeps one cursor for the log's one-statement calls: making a
    cursor for each statement (what ``execute`` does) costs about as much client time as
    building an append's parameters."""

    _kept: psycopg.AsyncCursor[Row] | None = None

    def kept_cursor(self) -> psycopg.AsyncCursor[Row]:
        """The connection's kept cursor (its last result is read before the next statement:
        a connection serves one caller at a time)."""
        cursor = self._kept
        if cursor is None or cursor.closed:
            cursor = self._kept = self.cursor()
        return cursor


def _said_goodbye(conn: Connection) -> bool:
    """Whether the server has closed ``conn``, or is closing it, while it sat in the pool: a
    restart, a failover, an idle timeout or ``pg_terminate_backend``. An idle pooled
    connection has nothing to read (it never LISTENs), so a readable socket means the
    server's last words or the end of the stream; telling so costs no round trip."""
    pgconn = conn.pgconn
    if pgconn.status != pq.ConnStatus.OK:
        return True
    socket = select.poll()  # not select.select: a busy process has descriptors past 1024
    socket.register(pgconn.socket, select.POLLIN)
    return bool(socket.poll(0))


async def _lend(pool: psycopg_pool.AsyncConnectionPool[Connection]) -> Connection:
    """A connection of ``pool`` the server has not closed: each one it has is closed and
    given back (the pool drops it and makes another), so that no statement is sent on a
    connection known dead. Bounded by the pool: its dead ones run out, and a new one that
    cannot be made is the pool's timeout."""
    while True:
        conn = await pool.getconn()
        if not _said_goodbye(conn):
            return conn
        with anyio.CancelScope(shield=True):  # a connection never given back is the pool's loss
            await conn.close()
            await pool.putconn(conn)


def _has_rows(cursor: psycopg.AsyncCursor[Row]) -> bool:
    """Whether the cursor's statement returned rows (``cursor.description`` says so too, but
    makes a column object of each column first)."""
    result = cursor.pgresult
    return result is not None and (result.nfields > 0 or result.status == pq.ExecStatus.TUPLES_OK)


async def _put_back(
    pool: psycopg_pool.AsyncConnectionPool[Connection],
    conn: Connection,
    bounded: anyio.CancelScope,
) -> None:
    """Give ``conn`` back to ``pool`` from inside the scope ``bounded``: neither its deadline
    nor, once that passed, the cancellation it delivers may cut the return short."""
    if bounded.cancel_called:
        with anyio.CancelScope(shield=True):
            await pool.putconn(conn)
    else:
        bounded.deadline = math.inf
        await pool.putconn(conn)


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


#: What a server error is when the server may answer the same call later: the DB-API's
#: "errors related to the database's operation" (a connection lost, the server shutting down,
#: a statement cancelled, a serialization failure), no connection within the pool's timeout,
#: no answer within ours.
TRANSIENT = (psycopg.OperationalError, psycopg_pool.PoolTimeout, TimeoutError)


def unavailable(masked: str, what: str, exc: BaseException) -> StoreUnavailable:
    """The error for a server error ``exc`` met while doing ``what`` with the log at ``masked``."""
    detail = str(exc).strip() or type(exc).__name__
    if isinstance(exc, psycopg_pool.PoolTimeout):
        detail = f"no connection to the server within the timeout ({detail})"
    return StoreUnavailable(
        f"event log {masked}: cannot {what}: {detail}", transient=isinstance(exc, TRANSIENT)
    )


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


class Database:
    """A log's way to its server: the pool (opened on first use, after the schema is made or
    checked on a connection of its own), the sessions' ids, and the server's errors turned into
    :class:`StoreUnavailable` naming the DSN with its password masked."""

    def __init__(self, dsn: str, *, min_size: int, max_size: int, timeout: float) -> None:
        self.dsn = dsn
        self.masked = mask_dsn(dsn)
        self.timeout = timeout
        self.channel = ""  # the schema's notification channel, known once connected
        self._sizes = (min_size, max_size)
        self._lock = anyio.Lock(fast_acquire=True)  # opening and closing
        self._pool: psycopg_pool.AsyncConnectionPool[Connection] | None = None
        self._sids: dict[SessionKey, int] = {}  # sessions' ids (rows are never deleted)
        self.closed = False

    def closed_error(self) -> StoreUnavailable:
        """The error of a call to a closed log."""
        return StoreUnavailable(f"event log {self.masked} is closed")

    async def close(self) -> None:
        """Close the pool (after the operations in flight); idempotent."""
        self.closed = True
        async with self._lock:
            pool, self._pool = self._pool, None
            if pool is not None:
                await pool.close()

    async def connect(self, action: Action) -> psycopg_pool.AsyncConnectionPool[Connection]:
        """The pool, opened now if need be (the schema created or checked first)."""
        pool = self._pool
        if pool is not None and not self.closed:
            return pool
        async with self._lock:
            if self.closed:
                raise self.closed_error()
            if self._pool is not None:
                return self._pool
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, connect_timeout=max(1, round(self.timeout))
                )
                async with conn:
                    schema = await set_up(conn, self.masked)
                pool = psycopg_pool.AsyncConnectionPool(
                    self.dsn,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    kwargs={"autocommit": True},
                    connection_class=Connection,
                    timeout=self.timeout,
                    open=False,
                )
                await pool.open()
            except ERRORS as exc:
                raise self.unavailable(action, exc) from exc
            self.channel = sql.channel_of(schema)
            self._pool = pool
            return pool

    @contextlib.asynccontextmanager
    async def connection(self, action: Action) -> AsyncIterator[Connection]:
        """A pooled connection (autocommit); the server's errors become ours.

        What the block sends is not cancelled midway: a caller cancelled meanwhile (a run's
        watch or heartbeat when the run ends) is cancelled once the block is done, at most
        ``timeout`` seconds later (then :class:`StoreUnavailable`). Cancelled mid-query,
        psycopg would cancel the query on the server, and anyio, cancelling again while it
        does, would make it close the connection: a new one to open for every such cancel.
        One scope, shielded and with the timeout as its deadline, covers the block and the
        connection's return (a scope costs a tenth of a short statement's client time). A
        deadline of the caller's that comes sooner is kept (:meth:`_deadline`).
        """
        pool = self._pool
        if pool is None or self.closed:
            pool = await self.connect(action)
        try:
            conn = await _lend(pool)
            with anyio.CancelScope(deadline=self._deadline(), shield=True) as bounded:
                try:
                    yield conn
                finally:
                    await _put_back(pool, conn, bounded)
        except ERRORS as exc:
            raise self.unavailable(action, exc) from exc
        if bounded.cancelled_caught:
            raise self.unavailable(action, TimeoutError("no answer within the timeout"))

    def _deadline(self) -> float:
        """When the statement about to be sent must be answered: ``timeout`` from now, or
        sooner when the caller set a deadline (a run's bounded last write, a stop's): the
        shield keeps a cancellation out, and it must not keep the caller past its own time.

        A caller already cancelled (its effective deadline is minus infinity) is answered
        first, as every cancelled caller is.
        """
        own = anyio.current_time() + self.timeout
        caller = anyio.current_effective_deadline()
        return own if caller == -math.inf else min(own, caller)

    async def all(self, action: Action, query: str, params: Params) -> list[Row]:
        """The rows of one statement (none for a statement without a result), on a pooled
        connection as :meth:`connection` lends it (written out: every append comes here, and
        the context manager's generator costs a twentieth of an append's client time)."""
        pool = self._pool
        if pool is None or self.closed:
            pool = await self.connect(action)
        rows: list[Row] = []
        try:
            conn = await _lend(pool)
            with anyio.CancelScope(deadline=self._deadline(), shield=True) as bounded:
                try:
                    cur = conn.kept_cursor()
                    await cur.execute(query, params)
                    if _has_rows(cur):
                        rows = await cur.fetchall()
                finally:
                    await _put_back(pool, conn, bounded)
        except ERRORS as exc:
            raise self.unavailable(action, exc) from exc
        if bounded.cancelled_caught:
            raise self.unavailable(action, TimeoutError("no answer within the timeout"))
        return rows

    async def one(self, action: Action, query: str, params: Params) -> Row:
        """The one row of a statement that always has one."""
        return (await self.all(action, query, params))[0]

    async def known_sid(self, key: SessionKey, action: Action) -> int | None:
        """The session's id, ``None`` for a session the log has never seen."""
        sid = self._sids.get(key)
        if sid is None:
            rows = await self.all(action, sql.SELECT_SID, sql.key_params(key))
            if rows:
                sid = self._sids[key] = rows[0][0]
        elif self.closed:
            raise self.closed_error()
        return sid

    def remember_sid(self, key: SessionKey, sid: int) -> None:
        """Keep the id a statement returned for ``key``'s session."""
        self._sids[key] = sid

    async def sids_of(self, keys: Collection[SessionKey], action: Action) -> dict[SessionKey, int]:
        """The ids of the sessions ``keys``, the sessions added if they are new."""
        sids = self._sids
        if self.closed:
            raise self.closed_error()
        for key in keys:
            while key not in sids:  # no row: another process was adding it; ask again
                rows = await self.all(action, sql.ENSURE_SESSION, sql.key_params(key))
                if rows:
                    sids[key] = rows[0][0]
        return sids

    def unavailable(self, action: Action, exc: BaseException) -> StoreUnavailable:
        """The error for a server error met while doing ``action``."""
        return unavailable(self.masked, action if isinstance(action, str) else action(), exc)
