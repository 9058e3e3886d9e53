"""PostgresEventLog: the durable store many workers on many hosts share, on psycopg 3 (async)."""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import AsyncIterator, Collection, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import anyio
import attrs

from .. import _prune as pruning
from .._errors import LeaseLost, SessionLocked, TokenExists, UnknownToken
from .._events import Event, EventKind, SessionKey, check_key, utcnow
from .._rules import (
    as_utc,
    check_batch_keys,
    check_fenced_batch,
    check_limit,
    checkpoint_of,
    lease_expiry,
    may_take_lease,
    process_alive,
)
from .._store import (
    SECRET_REUSED,
    Claim,
    EventLog,
    Lease,
    LeaseHolder,
    Now,
    PruneResult,
    SessionSummary,
    TokenRecord,
)
from . import _batch as batches
from . import _conn as pgconn
from . import _sql as sql
from ._listen import Listener, Watch
from ._prune import PostgresPruning


class PostgresEventLog(EventLog):
    """A durable :class:`~eventlog.EventLog` in a PostgreSQL database, shared by any number of
    processes on any number of hosts.

    ``dsn`` is a libpq connection string or URL; the tables live in the first schema of its
    ``search_path`` and are created there on first use (a schema of a newer store version is
    refused with :class:`~eventlog.StoreUnavailable`). The log opens on first use, by
    ``async with``, or by :meth:`open`, and keeps a pool of ``min_size`` to ``max_size``
    connections in autocommit mode: every write is one statement (one transaction, one trip
    to the server) or one short transaction. ``clock`` gives the current UTC time for leases:
    a lease's expiry is compared with the clock's now, never the server's. ``timeout`` is how
    long an operation waits to connect, for a free connection, or for the server's
    answer before :class:`~eventlog.StoreUnavailable`, which names the DSN with its password
    masked (a caller cancelled while its statement runs is cancelled once it is answered, so
    that the connection is kept).

    Besides the :class:`~eventlog.EventLog` methods it has :meth:`count`. Its
    :meth:`append_and_release` is one statement, and its :meth:`watch` wakes on notifications
    (through LISTEN on one dedicated connection: never through a transaction-pooling proxy).
    """

    durable: bool = True

    def __init__(
        self,
        dsn: str,
        *,
        clock: Now = utcnow,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
    ) -> None:
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ValueError(
                f"the pool needs 0 <= min_size <= max_size and max_size >= 1,"
                f" not min_size={min_size!r}, max_size={max_size!r}"
            )
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, not {timeout!r}")
        self._db = pgconn.Database(dsn, min_size=min_size, max_size=max_size, timeout=timeout)
        self._clock = clock
        self._host = socket.gethostname()
        self._listener: Listener | None = None

    @property
    def dsn(self) -> str:
        """The connection string, as given (its password too: :func:`repr` masks it)."""
        return self._db.dsn

    @property
    def channel(self) -> str:
        """The notification channel of this log's schema (empty until the log connects)."""
        return self._db.channel

    def __repr__(self) -> str:
        return f"PostgresEventLog({self._db.masked!r})"

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
        """Connect now (creating the schema if needed) rather than on first use."""
        await self._db.connect("open it")

    async def aclose(self) -> None:
        """Close the listener and the pool; idempotent. A closed log refuses every call."""
        if self._db.closed:
            return
        self._db.closed = True  # first: no watch may start a listener while this closes
        with anyio.CancelScope(shield=True):  # bounded: the operations in flight, then close
            listener, self._listener = self._listener, None
            if listener is not None:
                await listener.aclose()
            await self._db.close()

    # -- writing ---------------------------------------------------------------------------

    async def append(self, events: Sequence[Event], *, lease: Lease | None = None) -> list[int]:
        """Append ``events`` atomically, in order, in one statement; their ``seq``s, in order.

        The statement locks the rows of the batch's sessions first (fenced by ``lease``: only
        while the lease is still its holder's at its epoch, or :class:`~eventlog.LeaseLost`
        with nothing written), then takes the seqs, inserts, updates the summaries of its
        checkpoints and control requests and notifies listeners of its inbox, control and
        checkpoint events. A checkpoint kind without a checkpoint payload fails the whole
        batch (``TypeError``) before anything is sent.
        """
        if lease is not None:
            check_fenced_batch(events, lease)
        if not events:
            self._check_open()
            return []
        return await self._append(events, lease, release=False)

    async def append_and_release(self, events: Sequence[Event], lease: Lease) -> list[int]:
        """Append ``events`` fenced by ``lease`` and drop the lease, in one statement.

        Both happen or neither does: a lease lost meanwhile raises
        :class:`~eventlog.LeaseLost`, writes nothing and leaves the new holder's lease alone.
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
        for event in events:
            if event.kind == EventKind.CHECKPOINT:
                checkpoint_of(event)  # fails before any session is added
        key = events[0].key

        def action() -> str:
            return f"append to session {key}"

        sids = await self._db.sids_of({event.key for event in events}, action)
        fence = None if lease is None else (lease.holder.token, lease.epoch)
        query, params = batches.append_params(
            events, sids, channel=self._db.channel, fence=fence, release=release
        )
        if query is sql.APPEND:
            seqs = (await self._db.one(action, query, params))[0] or []
        else:  # the seqs are taken in batch order; RETURNING promises no order
            seqs = sorted(row[0] for row in await self._db.all(action, query, params))
        if not seqs:  # the fence locked nothing: not our lease any more
            assert lease is not None  # an unfenced batch always locks its sessions' rows
            raise await self._lost(lease)
        return seqs

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Take the session's lease for ``ttl`` seconds or raise :class:`SessionLocked`.

        The lease is free when nobody holds it, we hold it, it expired by this log's clock, or
        its holder was a process of this host that is gone (a zombie or a reused pid
        included). A live holder is never displaced. A new holder gets the next epoch. A
        free lease is taken in one statement; a held one is decided with its row locked, so
        that two askers never both get it.
        """
        check_key(key)
        now = as_utc(self._clock())
        expires_at = lease_expiry(now, ttl)
        action = f"lease session {key}"
        params = {
            **sql.key_params(key),
            **sql.holder_params(holder),
            "now": now,
            "expires_at": expires_at,
        }
        taken = await self._db.all(action, sql.TAKE_FREE_LEASE, params)
        if taken:
            sid, epoch, log_seq = taken[0]
            self._db.remember_sid(key, sid)
            return Lease(key, holder, expires_at, log_seq=log_seq, epoch=epoch)
        return await self._take_held_lease(key, holder, now, expires_at)

    async def _take_held_lease(
        self, key: SessionKey, holder: LeaseHolder, now: datetime, expires_at: datetime
    ) -> Lease:
        """The lease of a session another holder held at ``now``: ours if that holder was a
        gone process of this host, else :class:`SessionLocked`."""
        action = f"lease session {key}"
        sid = (await self._db.sids_of({key}, action))[key]
        async with self._db.connection(action) as conn, conn.transaction():
            cur = await conn.execute(sql.LOCK_LEASE, {"sid": sid})
            current, expiry, epoch = sql.lease_of_row(await cur.fetchone())
            if current is not None and not may_take_lease(
                current, expiry, holder, now, this_host=self._host
            ):
                raise SessionLocked(str(key), str(current))
            if current != holder:
                epoch += 1
            params = {
                **sql.holder_params(holder),
                "now": now,
                "expires_at": expires_at,
                "epoch": epoch,
                "sid": sid,
            }
            cur = await conn.execute(sql.WRITE_LEASE, params)
            found = await cur.fetchone()
        assert found is not None  # the row was locked above
        return Lease(key, holder, expires_at, log_seq=found[0], epoch=epoch)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend our lease (same epoch) or raise :class:`LeaseLost` when it is no longer ours."""
        now = as_utc(self._clock())
        expires_at = lease_expiry(now, ttl)
        params = {
            **sql.key_params(lease.key),
            "now": now,
            "expires_at": expires_at,
            "token": lease.holder.token,
            "epoch": lease.epoch,
        }
        async with self._db.connection(f"renew the lease of session {lease.key}") as conn:
            cur = await conn.execute(sql.RENEW_LEASE, params)
            renewed = cur.rowcount == 1
        if not renewed:
            raise await self._lost(lease)
        return attrs.evolve(lease, expires_at=expires_at)

    async def renew_leases(self, leases: Sequence[Lease], ttl: float) -> list[Lease]:
        """Renew many leases in one statement; the renewed ones, in the order given.

        A lease no longer its holder's at its epoch is left out (the caller treats its
        session as lost). The rows are locked in one order, so that renewals never deadlock.
        """
        now = as_utc(self._clock())
        expires_at = lease_expiry(now, ttl)
        if not leases:
            self._check_open()
            return []
        keys = [sql.key_params(lease.key) for lease in leases]
        params = {
            "apps": [key["app"] for key in keys],
            "users": [key["user"] for key in keys],
            "session_ids": [key["session_id"] for key in keys],
            "tokens": [lease.holder.token for lease in leases],
            "epochs": [lease.epoch for lease in leases],
            "now": now,
            "expires_at": expires_at,
        }
        rows = await self._db.all(f"renew {len(leases)} leases", sql.RENEW_LEASES, params)
        kept = sorted(row[0] - 1 for row in rows)
        return [attrs.evolve(leases[index], expires_at=expires_at) for index in kept]

    async def release_lease(self, lease: Lease) -> None:
        """Drop our lease (never another holder's, nor ours of another epoch) and notify;
        releasing twice is harmless. The epoch stays on the row, so that epochs only grow."""
        params = {
            **sql.key_params(lease.key),
            "token": lease.holder.token,
            "epoch": lease.epoch,
            "channel": self._db.channel,
            "payload": sql.notice(lease.key),
        }
        await self._db.all(f"release the lease of session {lease.key}", sql.RELEASE_LEASE, params)

    async def claim_due(
        self,
        now: datetime,
        holder: LeaseHolder,
        ttl: float,
        *,
        limit: int,
        interrupted: bool = False,
    ) -> list[Claim]:
        """Take the lease of up to ``limit`` due sessions nobody holds, in one statement
        (``UPDATE ... FOR UPDATE SKIP LOCKED ... RETURNING``); the rules are
        :meth:`eventlog.EventLog.claim_due`'s.

        Every claim is a new holding (a new epoch), and notifies. Which live-looking leases
        of this host's processes are gone is looked up first (a query, then the process
        table); a lease expires by this log's clock, never the server's.
        """
        if limit < 0:
            raise ValueError(f"a claim's limit must be >= 0 sessions, not {limit}")
        clock = as_utc(self._clock())
        expires_at = lease_expiry(clock, ttl)
        if limit == 0:
            self._check_open()
            return []
        params: dict[str, Any] = {
            "now": as_utc(now),
            "clock": clock,
            "interrupted": interrupted,
            "this_host": self._host,
        }
        local = await self._db.all("find due sessions", sql.SELECT_LOCAL_HOLDERS, params)
        alive = functools.cache(process_alive)  # a daemon holds many: one look per process
        params["gone"] = [token for token, pid, started in local if not alive(pid, started or "")]
        params.update(sql.holder_params(holder))
        params.update(limit=limit, expires_at=expires_at, channel=self._db.channel)
        rows = await self._db.all("claim due sessions", sql.CLAIM_DUE, params)
        claims = []
        for row in rows:
            summary, epoch, log_seq = sql.claim_from_row(row, holder, expires_at)
            lease = Lease(summary.key, holder, expires_at, log_seq=log_seq, epoch=epoch)
            claims.append(Claim(summary, lease))
        claims.sort(key=lambda claim: _claim_order(claim.summary, params["now"]))
        return claims

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

        Each session is pruned under its lease, taken for the prune (a live holder: the
        session is left alone, in ``held``), in statements of at most ``batch`` deleted
        events, each renewing the lease and checking that the session has no newer
        (or first) checkpoint. The space is given back by autovacuum, not at once.
        """
        pruner = pruning.Pruner(
            PostgresPruning(self._db.all, self._clock),
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
        when ``kinds`` would leave it out (see :class:`~eventlog.SqliteEventLog`).
        """
        check_limit(limit)
        action = f"read session {key}"
        sid = await self._db.known_sid(key, action)
        if sid is None or limit == 0:
            return []
        query = sql.SELECT_EVENTS
        params: dict[str, Any] = {"sid": sid}
        if after_seq:
            query += sql.AFTER_SEQ
            params["after_seq"] = after_seq
        if kinds is not None:
            query += sql.KIND_FILTER
            params.update(kinds=[str(kind) for kind in kinds], known=sql.KNOWN_KINDS)
        query += " ORDER BY seq"
        if limit is not None:
            query += " LIMIT %(limit)s"
            params["limit"] = limit
        rows = await self._db.all(action, query, params)
        return [sql.event_from_row(row, key) for row in rows]

    async def read_last(
        self, key: SessionKey, kinds: Collection[EventKind], limit: int
    ) -> list[Event]:
        """The newest ``limit`` events of the given kinds of one session, oldest first."""
        check_limit(limit)
        action = f"read session {key}"
        sid = await self._db.known_sid(key, action)
        if sid is None or limit == 0:
            return []
        query = sql.SELECT_EVENTS + sql.KIND_FILTER + " ORDER BY seq DESC LIMIT %(limit)s"
        params = {
            "sid": sid,
            "kinds": [str(kind) for kind in kinds],
            "known": sql.KNOWN_KINDS,
            "limit": limit,
        }
        rows = await self._db.all(action, query, params)
        return [sql.event_from_row(row, key) for row in reversed(rows)]

    async def count(self, key: SessionKey) -> int:
        """How many events the session has (0 for an unknown one)."""
        action = f"count session {key}"
        sid = await self._db.known_sid(key, action)
        if sid is None:
            return 0
        return int((await self._db.one(action, sql.COUNT_EVENTS, {"sid": sid}))[0])

    async def latest_checkpoint(self, key: SessionKey) -> Event | None:
        """The session's newest checkpoint event (found through its session row), or ``None``."""
        action = f"read session {key}"
        sid = await self._db.known_sid(key, action)
        if sid is None:
            return None
        rows = await self._db.all(action, sql.SELECT_CHECKPOINT, {"sid": sid})
        return sql.event_from_row(rows[0], key) if rows else None

    async def sessions(self) -> list[SessionSummary]:
        """Every session that has an event, newest first, with its live holder (the rules
        are :meth:`eventlog.EventLog.sessions`'s): a scan of the sessions table; the newest
        event of a session without a checkpoint is one index search."""
        params = {"clock": as_utc(self._clock())}
        rows = await self._db.all("list sessions", sql.SELECT_SESSIONS, params)
        return [sql.listed_from_row(row) for row in rows]

    async def due_sessions(self, now: datetime) -> list[SessionSummary]:
        """Sessions whose latest checkpoint is ``deferred`` with ``next_wake_at <= now`` (the
        summary's, which a wake request moves earlier), not stopped; earliest wake time first
        (a paused one too: the caller decides)."""
        params = {"clock": as_utc(self._clock()), "now": as_utc(now)}
        rows = await self._db.all("list due sessions", sql.SELECT_DUE, params)
        return [sql.summary_from_row(row) for row in rows]

    # -- tokens ----------------------------------------------------------------------------

    async def create_token(self, record: TokenRecord) -> None:
        """Keep the token ``record``, in one statement; a name (or digest) the log has raises
        :class:`~eventlog.TokenExists` with nothing written."""
        added, named = await self._db.one(
            f"add token {record.name!r}", sql.INSERT_TOKEN, sql.token_params(record)
        )
        if not added:
            raise TokenExists(record.name) if named else TokenExists(record.name, SECRET_REUSED)

    async def tokens(self) -> list[TokenRecord]:
        """Every token, revoked and expired ones too, oldest first."""
        rows = await self._db.all("list tokens", sql.SELECT_TOKENS, {})
        return [sql.token_from_row(row) for row in rows]

    async def revoke_token(self, name: str) -> TokenRecord:
        """Revoke the token ``name`` as of the log's clock (a revoked one stays as it was);
        an unknown name raises :class:`~eventlog.UnknownToken`."""
        params = {"name": sql.escape(name), "now": as_utc(self._clock())}
        rows = await self._db.all(f"revoke token {name!r}", sql.REVOKE_TOKEN, params)
        if not rows:
            raise UnknownToken(name)
        return sql.token_from_row(rows[0])

    async def token_by_digest(self, digest: str) -> TokenRecord | None:
        """The token whose secret has this digest, or None (a lookup in its unique index)."""
        rows = await self._db.all("find a token", sql.TOKEN_BY_DIGEST, {"digest": digest})
        return sql.token_from_row(rows[0]) if rows else None

    # -- notifications ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch(self, key: SessionKey | None = None) -> AsyncIterator[Watch]:
        """Wake-ups for one session (``key``), or for every session (``None``): see
        :class:`~eventlog.Watch`. Listening has begun when this enters: a change committed
        after that wakes the watch. The log's one listening connection (not a pooled one) is
        opened by its first watch and kept until the log closes; it is read while a watch
        waits (no task of its own)."""
        await self._db.connect("watch for changes")
        db = self._db
        if db.closed:
            raise db.closed_error()
        if self._listener is None:
            self._listener = Listener(db.dsn, db.channel, db.masked, db.timeout)
        listener = self._listener
        await listener.start()
        with listener.watch(key) as watch:
            yield watch

    def _check_open(self) -> None:
        if self._db.closed:
            raise self._db.closed_error()

    async def _lost(self, lease: Lease) -> LeaseLost:
        """The error for a lease found not ours, saying who holds the session now."""
        action = f"read the lease of session {lease.key}"
        rows = await self._db.all(action, sql.SELECT_LEASE, sql.key_params(lease.key))
        return LeaseLost(str(lease.key), sql.lost_detail(rows[0] if rows else None))


def _claim_order(summary: SessionSummary, now: datetime) -> tuple[int, datetime, int]:
    """Where a claimed session goes in claim_due's result: the due ones by wake time, then the
    interrupted ones by when they last wrote."""
    wake = summary.next_wake_at
    if summary.stop_reason == "deferred" and wake is not None and wake <= now:
        return (0, wake, summary.checkpoint_seq)
    return (1, summary.updated_at, summary.checkpoint_seq)
