"""SqliteEventLog: the durable store, on aiosqlite in WAL mode with one writer connection."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import aiosqlite
import anyio

from . import _schema as sql
from ._errors import LeaseLost, SessionLocked, StoreUnavailable
from ._events import Event, EventKind, SessionKey, utcnow
from ._rules import as_utc, check_limit, lease_expiry, may_take_lease, summary_of
from ._store import Clock, Lease, LeaseHolder, SessionSummary

T = TypeVar("T")

_SYNCHRONOUS = ("NORMAL", "FULL")


class SqliteEventLog:
    """A durable :class:`~eventlog.EventLog` in one SQLite file.

    The file is opened on first use, by ``async with``, or by :meth:`open`; a missing file is
    created (unless ``create=False``). The log keeps one connection (the writer) in WAL mode and
    runs one operation at a time on it. Other processes, such as a CLI injecting into a running
    session, can read and write the same file at once: they wait up to ``busy_timeout`` seconds
    for the write lock. Each write (an :meth:`append`, a lease change) is one ``BEGIN IMMEDIATE``
    transaction run in a single trip to aiosqlite's thread: all of it lands, or none of it.

    ``synchronous`` is SQLite's durability setting: ``"NORMAL"`` (the default; in WAL mode a
    power loss may lose the last commits, never corrupt the file) or ``"FULL"`` (sync on every
    commit). ``clock`` gives the current UTC time for leases. aiosqlite needs the asyncio backend.

    A file that cannot be opened or written (missing directory, read-only, disk full, a store
    written by a newer version) raises :class:`~eventlog.StoreUnavailable` naming the file.
    """

    durable: bool = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock = utcnow,
        synchronous: str = "NORMAL",
        create: bool = True,
        busy_timeout: float = 5.0,
    ) -> None:
        mode = synchronous.upper()
        if mode not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        if not busy_timeout >= 0:
            raise ValueError(f"busy_timeout must be >= 0 seconds, not {busy_timeout!r}")
        self._path = os.fspath(path)
        self._clock = clock
        self._synchronous = mode
        self._create = create
        self._busy_ms = int(busy_timeout * 1000)
        self._host = socket.gethostname()
        self._lock = anyio.Lock(fast_acquire=True)
        self._db: aiosqlite.Connection | None = None
        self._closed = False

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"SqliteEventLog({self._path!r})"

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Open the file now (creating the schema if needed) rather than on first use."""
        async with self._connection("open it"):
            pass

    async def aclose(self) -> None:
        """Close the connection after the operation in flight; idempotent.

        A closed log refuses every further call.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):  # bounded: the operation in flight, then close
            async with self._lock:
                db, self._db = self._db, None
                if db is not None:
                    try:
                        await db.close()
                    except sqlite3.Error as exc:
                        raise self._unavailable("close it", exc) from exc

    # -- writing ---------------------------------------------------------------------------

    async def append(self, events: Sequence[Event]) -> list[Event]:
        """Append ``events`` in one transaction, in order; returns them with their ``seq``.

        A checkpoint in the batch also updates its session's summary, in the same transaction.
        """
        if not events:
            return []
        rows = [sql.event_params(event) for event in events]
        return await self._write(
            f"append to session {events[0].key}", lambda conn, _: _insert(conn, events, rows)
        )

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Take the session's lease for ``ttl`` seconds or raise :class:`SessionLocked`.

        The lease is free when nobody holds it, we hold it, it expired, or its holder was a
        process of this host that no longer exists. A live holder is never displaced.
        """

        def take(conn: sqlite3.Connection, now: datetime) -> Lease:
            expires_at = lease_expiry(now, ttl)
            row = conn.execute(sql.SELECT_LEASE, sql.session_params(key)).fetchone()
            if row is not None:
                current = LeaseHolder(*row[:3])
                expiry = datetime.fromisoformat(row[3])
                if not may_take_lease(current, expiry, holder, now, this_host=self._host):
                    raise SessionLocked(str(key), str(current))
            stamps = (sql.timestamp(now), sql.timestamp(expires_at))
            params = (*sql.session_params(key), holder.host, holder.pid, holder.token, *stamps)
            conn.execute(sql.WRITE_LEASE, params)
            return Lease(key=key, holder=holder, expires_at=expires_at)

        return await self._write(f"lease session {key}", take)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend our lease or raise :class:`LeaseLost` when it is no longer ours."""
        key, holder = lease.key, lease.holder

        def renew(conn: sqlite3.Connection, now: datetime) -> Lease:
            expires_at = lease_expiry(now, ttl)
            stamps = (sql.timestamp(now), sql.timestamp(expires_at))
            ours = (holder.host, holder.pid, holder.token)
            cursor = conn.execute(sql.RENEW_LEASE, (*stamps, *sql.session_params(key), *ours))
            if cursor.rowcount != 1:
                row = conn.execute(sql.SELECT_LEASE, sql.session_params(key)).fetchone()
                detail = "released" if row is None else f"now held by {LeaseHolder(*row[:3])}"
                raise LeaseLost(str(key), detail)
            return Lease(key=key, holder=holder, expires_at=expires_at)

        return await self._write(f"renew the lease of session {key}", renew)

    async def release_lease(self, lease: Lease) -> None:
        """Drop our lease row (never another holder's); releasing twice is harmless."""
        params = (*sql.session_params(lease.key), lease.holder.token)
        await self._write(
            f"release the lease of session {lease.key}",
            lambda conn, _: conn.execute(sql.RELEASE_LEASE, params),
        )

    # -- reading ---------------------------------------------------------------------------

    async def read(
        self,
        key: SessionKey,
        *,
        after_seq: int = 0,
        kinds: Collection[EventKind] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Events of one session with ``seq > after_seq``, oldest first, optionally filtered."""
        check_limit(limit)
        query = sql.SELECT_EVENTS
        params: list[Any] = [*sql.session_params(key), after_seq]
        if kinds is not None:
            names = [str(kind) for kind in kinds]
            query += f" AND kind IN ({', '.join('?' * len(names))})"
            params.extend(names)
        query += " ORDER BY seq"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        rows = await self._fetch(f"read session {key}", query, params)
        return [sql.event_from_row(row, key) for row in rows]

    async def read_last(
        self, key: SessionKey, kinds: Collection[EventKind], limit: int
    ) -> list[Event]:
        """The newest ``limit`` events of the given kinds of one session, oldest first."""
        check_limit(limit)
        names = [str(kind) for kind in kinds]
        query = sql.SELECT_LAST.format(", ".join("?" * len(names))) + " ORDER BY seq DESC LIMIT ?"
        params = [*sql.session_params(key), *names, limit]
        rows = await self._fetch(f"read session {key}", query, params)
        return [sql.event_from_row(row, key) for row in reversed(rows)]

    async def latest_checkpoint(self, key: SessionKey) -> Event | None:
        """The session's newest checkpoint event (read through a partial index), or ``None``."""
        query, params = sql.SELECT_CHECKPOINT, sql.session_params(key)
        rows = await self._fetch(f"read session {key}", query, params)
        return sql.event_from_row(rows[0], key) if rows else None

    async def sessions(self) -> list[SessionSummary]:
        """Every session that has written a checkpoint, newest first, with its live holder."""
        rows = await self._fetch("list sessions", sql.SELECT_SESSIONS, (), with_now=True)
        return [sql.summary_from_row(row) for row in rows]

    async def due_sessions(self, now: datetime) -> list[SessionSummary]:
        """Sessions whose latest checkpoint is ``deferred`` with ``next_wake_at <= now``.

        Earliest wake time first; an indexed read.
        """
        params = (sql.timestamp(now),)
        rows = await self._fetch("list due sessions", sql.SELECT_DUE, params, with_now=True)
        return [sql.summary_from_row(row) for row in rows]

    # -- the connection --------------------------------------------------------------------

    async def _fetch(
        self, action: str, query: str, params: Sequence[Any], *, with_now: bool = False
    ) -> list[Any]:
        async with self._connection(action) as db:
            if with_now:
                params = [sql.timestamp(self._clock()), *params]
            return list(await db.execute_fetchall(query, params))

    async def _write(self, action: str, work: Callable[[sqlite3.Connection, datetime], T]) -> T:
        """Run ``work(conn, now)`` as one transaction, in one trip to the connection's thread.

        ``now`` is read from the clock once the connection is ours, just before the trip.
        """
        async with self._connection(action) as db:
            now = as_utc(self._clock())
            try:
                return await _on_thread(db, lambda conn: _transaction(conn, work, now))
            except Exception:
                if db.in_transaction:  # the rollback failed: start over on a fresh connection
                    await self._drop(db)
                raise

    @contextlib.asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[aiosqlite.Connection]:
        """The connection, ours alone for one operation; sqlite errors become ours here."""
        async with self._lock:
            try:
                yield self._db if self._db is not None else await self._connect()
            except sqlite3.Error as exc:
                raise self._unavailable(action, exc) from exc

    async def _connect(self) -> aiosqlite.Connection:
        if self._closed:
            raise StoreUnavailable(f"event log {self._path} is closed")
        if self._path != ":memory:":
            await self._check_file()
        db = await aiosqlite.connect(self._path, isolation_level=None)
        try:
            await db.executescript(
                f"PRAGMA busy_timeout = {self._busy_ms}; PRAGMA synchronous = {self._synchronous};"
            )
            await db.execute("PRAGMA journal_mode = WAL")
            await self._ensure_schema(db)
        except BaseException:
            with anyio.CancelScope(shield=True), contextlib.suppress(sqlite3.Error):
                await db.close()
            raise
        self._db = db
        return db

    async def _check_file(self) -> None:
        file = anyio.Path(self._path)
        if not await file.parent.is_dir():
            raise StoreUnavailable(
                f"event log {self._path}: directory {file.parent} does not exist"
            )
        if not self._create and not await file.exists():
            raise StoreUnavailable(f"event log {self._path} does not exist (create=False)")

    async def _ensure_schema(self, db: aiosqlite.Connection) -> None:
        if not list(await db.execute_fetchall(sql.HAS_META)):
            await db.executescript(sql.SCHEMA_SCRIPT)
        rows = list(await db.execute_fetchall(sql.GET_VERSION))
        found = str(rows[0][0]) if rows else "none"
        if found != str(sql.STORE_VERSION):
            newer = found.isdigit() and int(found) > sql.STORE_VERSION
            raise StoreUnavailable(
                f"event log {self._path} has store schema version {found}, this code reads"
                f" version {sql.STORE_VERSION}" + ("; upgrade the library" if newer else "")
            )

    async def _drop(self, db: aiosqlite.Connection) -> None:
        self._db = None
        with anyio.CancelScope(shield=True), contextlib.suppress(sqlite3.Error):
            await db.close()

    def _unavailable(self, action: str, exc: sqlite3.Error) -> StoreUnavailable:
        return StoreUnavailable(f"event log {self._path}: cannot {action}: {exc}")


async def _on_thread(db: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``work`` with the raw connection on aiosqlite's thread, in one queued call.

    aiosqlite has no public way to run several statements in one trip to its thread, and each
    trip is a thread handoff that costs more than the SQL (three trips for a batch with a
    checkpoint: about three times the cost). This is the one place that uses aiosqlite
    internals: ``Connection._execute`` and ``Connection._conn``, as aiosqlite's own ``Cursor``
    does. Cancelling the caller does not stop ``work``: the transaction still ends, whole.
    """
    result: T = await db._execute(lambda: work(db._conn))  # type: ignore[no-untyped-call]
    return result


def _transaction(
    conn: sqlite3.Connection, work: Callable[[sqlite3.Connection, datetime], T], now: datetime
) -> T:
    """``work(conn, now)`` in ``BEGIN IMMEDIATE ... COMMIT``, rolled back if it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work(conn, now)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    return result


def _insert(conn: sqlite3.Connection, events: Sequence[Event], rows: list[Any]) -> list[Event]:
    """Insert a batch (and its sessions' new summaries); the events with their seqs."""
    cursor = conn.cursor()
    stored: list[Event] = []
    latest: dict[SessionKey, Event] = {}
    for event, row in zip(events, rows, strict=True):
        cursor.execute(sql.INSERT_EVENT, row)
        seq = cursor.lastrowid
        assert seq is not None  # an INSERT always sets it
        appended = Event(
            key=event.key,
            kind=event.kind,
            payload=event.payload,
            author=event.author,
            at=event.at,
            id=event.id,
            seq=seq,
            v=event.v,
        )
        stored.append(appended)
        if appended.kind == EventKind.CHECKPOINT:
            latest[appended.key] = appended
    if latest:
        summaries = [sql.summary_params(summary_of(event)) for event in latest.values()]
        cursor.executemany(sql.UPSERT_SESSION, summaries)
    return stored
