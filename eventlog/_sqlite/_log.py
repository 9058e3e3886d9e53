"""SqliteEventLog: the durable store, on aiosqlite in WAL mode with one writer connection."""

from __future__ import annotations

import functools
import os
import socket
import sqlite3
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeAlias, TypeVar

import aiosqlite
import anyio

from .. import _prune as pruning
from .._errors import StoreUnavailable
from .._events import Event, EventKind, SessionKey, check_key, utcnow
from .._rules import (
    as_utc,
    check_batch_keys,
    check_claim_limit,
    check_fenced_batch,
    check_limit,
    lease_expiry,
)
from .._store import (
    Claim,
    EventLog,
    Lease,
    LeaseHolder,
    Now,
    PruneResult,
    SessionSummary,
    TokenRecord,
)
from . import _schema as sql
from . import _tx as tx
from . import _worker as worker
from ._prune import SqlitePruning

T = TypeVar("T")

#: What an operation was doing, for its error message: text, or a function that makes the text
#: (built only when the operation fails, never on the hot path).
Action: TypeAlias = str | Callable[[], str]

_SYNCHRONOUS = ("NORMAL", "FULL")
#: SQLite's primary result codes that say a file cannot be written (or opened for writing).
READ_ONLY_CODES = frozenset({sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN})
#: Those that say another connection held the file: the same call may succeed later.
BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


class SqliteEventLog(EventLog):
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

    ``read_only=True`` opens an existing store for reading only (never creating the file or its
    tables, never migrating it); a store that cannot be written (a read-only file system or
    file) is opened so by itself. A read-only log serves every read, and every write raises
    :class:`~eventlog.StoreUnavailable` saying the event log is read-only. Where even SQLite's
    shared-memory file cannot be made (a read-only directory), the file is read as it stands
    (``immutable``): what was still only in its WAL, after a crash, is not seen.

    A file of an older store version (2 to 5) is migrated to the current one in place when
    opened, in one transaction.
    """

    durable: bool = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Now = utcnow,
        synchronous: str = "NORMAL",
        create: bool = True,
        busy_timeout: float = 5.0,
        read_only: bool = False,
    ) -> None:
        mode = synchronous.upper()
        if mode not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        if not busy_timeout >= 0:
            raise ValueError(f"busy_timeout must be >= 0 seconds, not {busy_timeout!r}")
        self._path = os.fspath(path)
        if read_only and self._path == ":memory:":
            raise ValueError("read_only needs a file: a new in-memory database holds nothing")
        self._read_only = read_only  # also set when the file turns out unwritable on open
        self._clock = clock
        self._synchronous = mode
        self._create = create
        self._busy_ms = int(busy_timeout * 1000)
        self._host = socket.gethostname()
        self._lock = anyio.Lock(fast_acquire=True)  # opening and closing, not each operation
        self._db: aiosqlite.Connection | None = None
        self._sids: dict[SessionKey, int] = {}  # sessions.sid of each session seen, once committed
        self._forget_exit: Callable[[], None] | None = None  # cancels the close at exit
        self._closed = False

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    @property
    def read_only(self) -> bool:
        """Whether this log only reads: asked for, or found so when it opened the file."""
        return self._read_only

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
        await self._connection("open it")

    async def aclose(self) -> None:
        """Close the connection after the operations in flight; idempotent.

        A closed log refuses every further call. A log that is never closed does not keep the
        process alive: its connection is closed at interpreter exit.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):  # bounded: the operations in flight, then close
            async with self._lock:
                db, self._db = self._db, None
                if db is not None:
                    self._forget_exit_hook()
                    try:
                        await db.close()
                    except sqlite3.Error as exc:
                        raise self._unavailable("close it", exc) from exc

    # -- writing ---------------------------------------------------------------------------

    async def append(self, events: Sequence[Event], *, lease: Lease | None = None) -> list[int]:
        """Append ``events`` in one transaction, in order; returns their ``seq``s, in order.

        A checkpoint in the batch also updates its session's summary, in the same transaction.
        An event that cannot be stored (a checkpoint kind without a checkpoint payload) fails
        the whole batch, before anything is written. The events are encoded here, before the
        trip to the connection's thread: inside a run that is cheaper than on the thread (the
        events are fresh in this thread's caches) and the transaction holds the write lock
        for the inserts alone.

        With ``lease``, the transaction first reads the session's lease row (a primary key
        lookup, in the same trip): not ``lease``'s holder at ``lease``'s epoch any more, and
        :class:`~eventlog.LeaseLost` is raised with nothing written. All events of a fenced
        batch must be of ``lease.key`` (``ValueError``).
        """
        if lease is not None:
            check_fenced_batch(events, lease)
        if not events:
            return []
        return await self._append(events, lease, release=False)

    async def append_and_release(self, events: Sequence[Event], lease: Lease) -> list[int]:
        """Append ``events`` fenced by ``lease`` and drop it, in the same transaction.

        Both happen or neither does: a lease lost meanwhile raises
        :class:`~eventlog.LeaseLost`, writes nothing and leaves the new holder's lease alone.
        One trip to the connection's thread instead of two.
        """
        check_fenced_batch(events, lease)
        if not events:
            await self.release_lease(lease)
            return []
        return await self._append(events, lease, release=True)

    async def _append(
        self, events: Sequence[Event], lease: Lease | None, *, release: bool
    ) -> list[int]:
        check_batch_keys(events)
        rows, updates = tx.encode(events, self._sids)
        insert = functools.partial(tx.insert, rows=rows, updates=updates)
        if lease is not None:
            insert = functools.partial(tx.fenced, insert=insert, lease=lease, release=release)
        seqs, added = await self._write(
            lambda: f"append to session {events[0].key}", worker.in_transaction(insert)
        )
        if added:  # committed: these sessions' ids are final
            self._sids.update(added)
        return seqs

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Take the session's lease for ``ttl`` seconds or raise :class:`SessionLocked`.

        The lease is free when nobody holds it, we hold it, it expired, or its holder was a
        process of this host that is gone (a zombie or a reused pid included). A live holder
        is never displaced. A holder that did not hold it already gets the next epoch.
        """
        check_key(key)
        now = as_utc(self._clock())
        expires_at = lease_expiry(now, ttl)

        take = functools.partial(
            tx.take_lease, key=key, holder=holder, now=now, expires_at=expires_at, host=self._host
        )
        return await self._write(lambda: f"lease session {key}", worker.in_transaction(take))

    async def claim_due(
        self,
        now: datetime,
        holder: LeaseHolder,
        ttl: float,
        *,
        limit: int,
        interrupted: bool = False,
    ) -> list[Claim]:
        """Take the lease of up to ``limit`` due sessions nobody holds, in one ``BEGIN
        IMMEDIATE`` transaction; the rules are :meth:`eventlog.EventLog.claim_due`'s.

        Expiry is judged on the store's clock, a holder of this host by its process (as
        :meth:`acquire_lease` does). Every claim is a new holding: the next epoch, even of a
        lease the claimer let expire.
        """
        check_claim_limit(limit)
        moment = as_utc(self._clock())
        expires_at = lease_expiry(moment, ttl)
        ask = tx.ClaimAsk(now, holder, moment, expires_at, limit, interrupted, self._host)
        work = worker.in_transaction(functools.partial(tx.claim, ask=ask))
        return await self._write("claim due sessions", work)

    async def renew_leases(self, leases: Sequence[Lease], ttl: float) -> list[Lease]:
        """Renew many leases in one transaction: the renewed ones (same epoch, later expiry),
        in the order given; one no longer its holder's at its epoch is left out."""
        moment = as_utc(self._clock())
        expires_at = lease_expiry(moment, ttl)
        if not leases:
            return []
        renew = functools.partial(tx.renew_all, leases=leases, now=moment, expires_at=expires_at)
        return await self._write("renew leases", worker.in_transaction(renew))

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend our lease (same epoch) or raise :class:`LeaseLost` when it is no longer ours."""
        key = lease.key
        now = as_utc(self._clock())
        expires_at = lease_expiry(now, ttl)
        renew = functools.partial(tx.renew_one, lease=lease, now=now, expires_at=expires_at)
        return await self._write(
            lambda: f"renew the lease of session {key}", worker.in_transaction(renew)
        )

    async def release_lease(self, lease: Lease) -> None:
        """Drop our lease (never another holder's, nor ours of another epoch); releasing twice
        is harmless. The row stays, without a holder, so that the session's epochs only grow."""
        await self._write(
            lambda: f"release the lease of session {lease.key}",
            worker.in_transaction(functools.partial(tx.drop_lease, lease=lease)),
        )

    async def prune(
        self,
        before: datetime,
        *,
        dry_run: bool = False,
        interrupted: bool = False,
        batch: int = pruning.BATCH,
    ) -> PruneResult:
        """Drop the events of sessions that finished before ``before``, but their final
        checkpoint and notes (the rules are :meth:`eventlog.EventLog.prune`'s; ``interrupted``
        takes the cut-off sessions and those without a checkpoint too).

        Each session is pruned under its lease, taken for the prune (a live holder: the session
        is left alone, in ``held``), in transactions of at most ``batch`` deleted events, so
        that a live run's append waits little behind it; each batch renews the lease and checks
        that the session has no newer (or first) checkpoint. The newest event of the whole log
        stays, whichever session it is of (SQLite would hand its seq out again). The file does
        not shrink: SQLite reuses the freed pages; ``VACUUM`` gives them back, offline.
        """
        pruner = pruning.Pruner(
            SqlitePruning(self._fetch, self._write, self._clock),
            self.acquire_lease,
            self.release_lease,
            clock=self._clock,
            host=self._host,
        )
        return await pruner.run(before, dry_run=dry_run, batch=batch, interrupted=interrupted)

    # -- reading ---------------------------------------------------------------------------

    async def read(
        self,
        key: SessionKey,
        *,
        after_seq: int = 0,
        kinds: Collection[EventKind] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Events of one session with ``seq > after_seq``, oldest first, optionally filtered.

        A row of a kind this code does not know raises :class:`~eventlog.CorruptEvent` even
        when ``kinds`` would leave it out: it may be what a newer release wrote, and a reader
        must not go on as if it were not there.
        """
        check_limit(limit)
        query = sql.SELECT_EVENTS
        params: list[Any] = [*sql.session_params(key), after_seq]
        if kinds is not None:
            names = [str(kind) for kind in kinds]
            query += sql.KIND_FILTER.format(", ".join("?" * len(names)))
            params.extend(names)
        query += " ORDER BY seq"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        rows = await self._fetch(lambda: f"read session {key}", query, params)
        return [sql.event_from_row(row, key) for row in rows]

    async def read_last(
        self, key: SessionKey, kinds: Collection[EventKind], limit: int
    ) -> list[Event]:
        """The newest ``limit`` events of the given kinds of one session, oldest first.

        A row of an unknown kind among them raises :class:`~eventlog.CorruptEvent` (see
        :meth:`read`).
        """
        check_limit(limit)
        names = [str(kind) for kind in kinds]
        query = sql.SELECT_LAST.format(", ".join("?" * len(names))) + " ORDER BY seq DESC LIMIT ?"
        params = [*sql.session_params(key), *names, limit]
        rows = await self._fetch(lambda: f"read session {key}", query, params)
        return [sql.event_from_row(row, key) for row in reversed(rows)]

    async def count(self, key: SessionKey) -> int:
        """How many events the session has (0 for an unknown one)."""
        query, params = sql.COUNT_EVENTS, sql.session_params(key)
        rows = await self._fetch(lambda: f"count session {key}", query, params)
        return int(rows[0][0])

    async def latest_checkpoint(self, key: SessionKey) -> Event | None:
        """The session's newest checkpoint event (found through its summary row), or ``None``."""
        query, params = sql.SELECT_CHECKPOINT, sql.session_params(key)
        rows = await self._fetch(lambda: f"read session {key}", query, params)
        return sql.event_from_row(rows[0], key) if rows else None

    async def sessions(self) -> list[SessionSummary]:
        """Every session that has an event, newest first, with its live holder (the rules
        are :meth:`eventlog.EventLog.sessions`'s): a scan of the sessions table; the newest
        event of a session without a checkpoint is one index search."""
        params = (sql.timestamp(self._clock()),)
        rows = await self._fetch("list sessions", sql.SELECT_SESSIONS, params)
        return [sql.listed_from_row(row) for row in rows]

    async def due_sessions(self, now: datetime) -> list[SessionSummary]:
        """Sessions whose latest checkpoint is ``deferred`` with ``next_wake_at <= now`` (the
        summary's, which a wake request moves earlier).

        Earliest wake time first; an indexed read.
        """
        params = (sql.timestamp(self._clock()), sql.timestamp(now))
        rows = await self._fetch("list due sessions", sql.SELECT_DUE, params)
        return [sql.summary_from_row(row) for row in rows]

    # -- tokens ----------------------------------------------------------------------------

    async def create_token(self, record: TokenRecord) -> None:
        """Keep the token ``record`` in one transaction; a name (or digest) the log has raises
        :class:`~eventlog.TokenExists` with nothing written."""
        add = functools.partial(tx.add_token, record=record)
        await self._write(lambda: f"add token {record.name!r}", worker.in_transaction(add))

    async def tokens(self) -> list[TokenRecord]:
        """Every token, revoked and expired ones too, oldest first."""
        rows = await self._fetch("list tokens", sql.SELECT_TOKENS, ())
        return [sql.token_from_row(row) for row in rows]

    async def revoke_token(self, name: str) -> TokenRecord:
        """Revoke the token ``name`` as of the log's clock (a revoked one stays as it was);
        an unknown name raises :class:`~eventlog.UnknownToken`."""
        revoke = functools.partial(tx.revoke_token, name=name, now=as_utc(self._clock()))
        return await self._write(lambda: f"revoke token {name!r}", worker.in_transaction(revoke))

    async def token_by_digest(self, digest: str) -> TokenRecord | None:
        """The token whose secret has this digest, or None (a lookup in its unique index)."""
        rows = await self._fetch("find a token", sql.TOKEN_BY_DIGEST, (digest,))
        return sql.token_from_row(rows[0]) if rows else None

    # -- the connection --------------------------------------------------------------------

    async def _fetch(self, action: Action, query: str, params: Sequence[Any]) -> list[Any]:
        """The rows of one query, read in one trip to the connection's thread."""
        db = self._db
        if db is None:
            db = await self._connection(action)
        try:
            return await worker.on_thread(db, lambda conn: conn.execute(query, params).fetchall())
        except sqlite3.Error as exc:
            raise self._unavailable(action, exc) from exc

    async def _write(self, action: Action, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(conn)`` (a transaction) in one trip to the connection's thread.

        Operations need no lock of their own: each is queued whole on the connection's one
        thread, which runs them one at a time, in order.
        """
        db = self._db
        if db is None:
            db = await self._connection(action)
        if self._read_only:
            what = action if isinstance(action, str) else action()
            raise StoreUnavailable(f"event log {self._path} is read-only: cannot {what}")
        try:
            try:
                return await worker.on_thread(db, work)
            except worker.StuckTransaction as stuck:  # start over with a new connection
                await self._drop(db)
                failure = stuck.__cause__
                assert failure is not None  # StuckTransaction is always raised from one
                raise failure from None
        except sqlite3.Error as exc:
            raise self._unavailable(action, exc) from exc

    async def _connection(self, action: Action) -> aiosqlite.Connection:
        """The open connection, opened now if need be; sqlite errors become ours here."""
        async with self._lock:
            if self._db is not None:
                return self._db
            try:
                return await self._connect()
            except sqlite3.Error as exc:
                raise self._unavailable(action, exc) from exc

    async def _connect(self) -> aiosqlite.Connection:
        if self._closed:
            raise StoreUnavailable(f"event log {self._path} is closed")
        if self._path != ":memory:":
            await self._check_file()
        if not self._read_only:
            try:
                return await self._open(self._path, read_only=False)
            except sqlite3.OperationalError as exc:
                # A file we cannot write (or whose -shm file cannot be made) may still be read.
                if tx.code(exc) not in READ_ONLY_CODES or not await anyio.Path(self._path).exists():
                    raise
        db = await self._open_read_only()
        self._read_only = True
        return db

    async def _open_read_only(self) -> aiosqlite.Connection:
        """The file opened for reading only; never created, never given tables or migrated."""
        uri = (await anyio.Path(self._path).absolute()).as_uri() + "?mode=ro"
        try:
            return await self._open(uri, read_only=True, uri=True)
        except sqlite3.OperationalError as exc:
            if tx.code(exc) != sqlite3.SQLITE_CANTOPEN:
                raise
        # WAL mode needs the -shm file, which a read-only directory cannot get: read the file
        # as it stands (SQLite then ignores the WAL, as it may, the file being unwritable).
        return await self._open(uri + "&immutable=1", read_only=True, uri=True)

    async def _open(
        self, target: str, *, read_only: bool, uri: bool = False
    ) -> aiosqlite.Connection:
        """A connection to ``target``, set up on its thread (for reading only: a look at the
        store version, nothing changed); a store of another version is refused."""
        set_up: Callable[[sqlite3.Connection], str] = (
            functools.partial(tx.look, busy_ms=self._busy_ms)
            if read_only
            else functools.partial(tx.set_up, busy_ms=self._busy_ms, synchronous=self._synchronous)
        )
        db, forget_exit = await worker.connect(target, uri=uri)
        try:
            found = await worker.on_thread(db, set_up)
        except BaseException:
            await worker.close_quietly(db, forget_exit)
            raise
        if found != str(sql.STORE_VERSION):
            await worker.close_quietly(db, forget_exit)
            raise StoreUnavailable(version_problem(self._path, found, read_only=read_only))
        self._sids.clear()  # a fresh ":memory:" database numbers its sessions anew
        self._db, self._forget_exit = db, forget_exit
        return db

    async def _check_file(self) -> None:
        file = anyio.Path(self._path)
        if not await file.parent.is_dir():
            raise StoreUnavailable(
                f"event log {self._path}: directory {file.parent} does not exist"
            )
        if not (self._create and not self._read_only) and not await file.exists():
            why = "read_only=True" if self._read_only else "create=False"
            raise StoreUnavailable(f"event log {self._path} does not exist ({why})")

    async def _drop(self, db: aiosqlite.Connection) -> None:
        """Close ``db`` after a failure that left it unusable; the next call opens another."""
        forget_exit = None
        if self._db is db:
            self._db, forget_exit, self._forget_exit = None, self._forget_exit, None
        await worker.close_quietly(db, forget_exit)

    def _forget_exit_hook(self) -> None:
        if self._forget_exit is not None:
            self._forget_exit()
            self._forget_exit = None

    def _unavailable(self, action: Action, exc: sqlite3.Error) -> StoreUnavailable:
        return unavailable(self._path, action if isinstance(action, str) else action(), exc)


# -- errors: a file it cannot use, an sqlite error turned into ours ------------------------


def version_problem(path: str, found: str, *, read_only: bool) -> str:
    """Why the file ``path``, of store version ``found``, cannot be used."""
    if found == "none" and read_only:
        return f"event log {path} has no event log tables (opened read-only: not made)"
    problem = (
        f"event log {path} has store schema version {found}, this code reads"
        f" version {sql.STORE_VERSION}"
    )
    if found.isdigit() and int(found) > sql.STORE_VERSION:
        return problem + "; upgrade the library"
    if found in sql.MIGRATIONS and read_only:
        return problem + f" and migrates version {found}, but the file is read-only"
    return problem


def unavailable(path: str, what: str, exc: sqlite3.Error) -> StoreUnavailable:
    """The error for an sqlite error ``exc`` met while doing ``what`` with the file ``path``."""
    if tx.code(exc) == sqlite3.SQLITE_READONLY:
        return StoreUnavailable(f"event log {path} is read-only: cannot {what} ({exc})")
    directory = os.path.dirname(os.path.abspath(path))
    if tx.code(exc) == sqlite3.SQLITE_CANTOPEN and not os.access(directory, os.W_OK):
        # SQLite says "unable to open database file" where nothing can be written.
        return StoreUnavailable(
            f"event log {path}: cannot {what}: directory {directory} is read-only ({exc})"
        )
    busy = tx.code(exc) in BUSY_CODES  # another writer held the file past busy_timeout
    return StoreUnavailable(f"event log {path}: cannot {what}: {exc}", transient=busy)
