"""What SqliteEventLog runs on its writer thread, inside one transaction: inserts, the lease
fence, releases, claims and batched renewals, session ids, tokens and the schema migration; and the
set-up of a connection it opens (pragmas, WAL mode, the schema), and the result code of an
sqlite error."""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import attrs

from .._errors import LeaseLost, SessionLocked, TokenExists, UnknownToken
from .._events import Event, EventKind, SessionKey
from .._rules import control_marks, lease_gone, may_take_lease, process_alive
from .._store import SECRET_REUSED, Claim, Lease, LeaseHolder, TokenRecord
from . import _schema as sql
from . import _worker as worker

#: A summary update: its statement, and its parameters between the event's seq and the sid.
SummaryUpdate = tuple[str, tuple[Any, ...]]


def version(conn: sqlite3.Connection) -> str:
    """The store schema version the file says it has (``"none"`` when it does not say)."""
    row = conn.execute(sql.GET_VERSION).fetchone()
    return "none" if row is None else str(row[0])


def code(exc: sqlite3.Error) -> int:
    """The primary SQLite result code of ``exc`` (its extended code's low byte); -1 if none."""
    found = getattr(exc, "sqlite_errorcode", None)
    return -1 if found is None else found & 0xFF


#: How long :func:`enter_wal` sleeps between its tries, in seconds.
WAL_RETRY_EVERY = 0.005


def enter_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Put the file in WAL mode, waiting up to ``busy_timeout`` seconds for other connections.

    Leaving the rollback journal needs the file to itself, and when another connection holds
    its write lock SQLite says "database is locked" at once, without calling the busy handler
    (the two would deadlock). Several processes starting on a new file together meet this;
    the others finish in moments, so the switch is tried again until the timeout.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if code(exc) != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(WAL_RETRY_EVERY)


def set_up(conn: sqlite3.Connection, *, busy_ms: int, synchronous: str) -> str:
    """A writer connection's set-up: pragmas, WAL mode, then the schema if the file has none
    (or a migration, in one transaction); the file's store version."""
    conn.executescript(
        f"PRAGMA busy_timeout = {busy_ms}; PRAGMA synchronous = {synchronous};"
        f" PRAGMA wal_autocheckpoint = {sql.WAL_AUTOCHECKPOINT};"
        f" PRAGMA page_size = {sql.PAGE_SIZE};"  # a new file only; must precede WAL mode
    )
    enter_wal(conn, busy_ms / 1000)
    if conn.execute(sql.HAS_META).fetchone() is None:
        conn.executescript(sql.SCHEMA_SCRIPT)
    if version(conn) in sql.MIGRATIONS:
        worker.transaction(conn, migrate)
    return version(conn)


def look(conn: sqlite3.Connection, *, busy_ms: int) -> str:
    """A read-only connection's set-up: the file's store version, changing nothing."""
    conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    if conn.execute(sql.HAS_META).fetchone() is None:
        return "none"
    return version(conn)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring an older file to the current version, one version at a time, inside the caller's
    transaction.

    The version is read again under the write lock: another process may have migrated the
    file between our first look and the lock.
    """
    while (steps := sql.MIGRATIONS.get(version(conn))) is not None:
        for statement in steps:
            conn.execute(statement)


def encode(
    events: Sequence[Event], sids: dict[SessionKey, int]
) -> tuple[list[tuple[Any, ...]], dict[int, SummaryUpdate]]:
    """A batch's INSERT rows, and the summary updates (statement, parameters after the seq) of
    its checkpoints and control requests, by row index.

    ``sids`` is the log's cache of session ids: a session not in it is named by its key, for
    :func:`insert` to resolve inside the transaction.
    """
    rows: list[tuple[Any, ...]] = []
    updates: dict[int, SummaryUpdate] = {}
    for event in events:
        rows.append(sql.event_row(sids.get(event.key, event.key), event))
        if event.kind == EventKind.CHECKPOINT:
            updates[len(rows) - 1] = (sql.UPDATE_SUMMARY, sql.checkpoint_params(event))
        elif event.kind == EventKind.CONTROL:
            # one request marks at most one thing; the statements apply each in append order
            marks = control_marks(event)
            if marks.stopped:
                updates[len(rows) - 1] = (sql.MARK_STOPPED, ())
            elif marks.paused is not None:
                updates[len(rows) - 1] = (sql.MARK_PAUSED, (int(marks.paused),))
            elif marks.woken_at is not None:
                updates[len(rows) - 1] = (sql.MARK_WOKEN, (sql.timestamp(marks.woken_at),))
    return rows, updates


def insert(
    conn: sqlite3.Connection,
    *,
    rows: list[tuple[Any, ...]],
    updates: dict[int, SummaryUpdate],
) -> tuple[list[int], dict[SessionKey, int]]:
    """Insert a batch and its summary updates; the seqs, and the sessions it added.

    A row whose first parameter is a :class:`SessionKey` (not yet an id) gets the session's id
    here, the session added if it is new to the file.
    """
    cursor = conn.cursor()
    seqs: list[int] = []
    added: dict[SessionKey, int] = {}
    for index, row in enumerate(rows):
        key = row[0]
        if isinstance(key, SessionKey):
            sid = added.get(key)
            if sid is None:
                sid = added[key] = session_id(cursor, key)
            row = (sid, *row[1:])  # noqa: PLW2901
        cursor.execute(sql.INSERT_EVENT, row)
        seq = cursor.lastrowid
        assert seq is not None  # an INSERT always sets it
        seqs.append(seq)
        if updates and index in updates:
            statement, params = updates[index]
            cursor.execute(statement, (seq, *params, row[0]))
    return seqs, added


def fenced(
    conn: sqlite3.Connection,
    *,
    insert: Callable[[sqlite3.Connection], tuple[list[int], dict[SessionKey, int]]],
    lease: Lease,
    release: bool,
) -> tuple[list[int], dict[SessionKey, int]]:
    """``insert`` if ``lease`` is still the session's (holder and epoch), then drop it if
    ``release``; inside the caller's transaction. A lost lease raises :class:`LeaseLost`
    before anything is written."""
    row = conn.execute(sql.SELECT_LEASE, sql.session_params(lease.key)).fetchone()
    current, _, epoch = sql.lease_of_row(row)
    if current is None or current.token != lease.holder.token or epoch != lease.epoch:
        raise LeaseLost(str(lease.key), sql.lost_detail(row))
    result = insert(conn)
    if release:
        drop_lease(conn, lease)
    return result


def drop_lease(conn: sqlite3.Connection, lease: Lease) -> None:
    """Clear ``lease``'s holder from its row if it is still ours, at its epoch."""
    params = (*sql.session_params(lease.key), lease.holder.token, lease.epoch)
    conn.execute(sql.RELEASE_LEASE, params)


def session_id(cursor: sqlite3.Cursor, key: SessionKey) -> int:
    """The id of session ``key`` in the file, the session added if it is new."""
    params = sql.session_params(key)
    found = cursor.execute(sql.SELECT_SID, params).fetchone()
    if found is not None:
        return int(found[0])
    cursor.execute(sql.INSERT_SESSION, params)
    sid = cursor.lastrowid
    assert sid is not None  # an INSERT always sets it
    return sid


def take_lease(
    conn: sqlite3.Connection,
    *,
    key: SessionKey,
    holder: LeaseHolder,
    now: datetime,
    expires_at: datetime,
    host: str,
) -> Lease:
    """Take the session's lease for ``holder`` (the next epoch unless it holds it already),
    inside the caller's transaction, or raise :class:`SessionLocked`."""
    row = conn.execute(sql.SELECT_LEASE, sql.session_params(key)).fetchone()
    current, expiry, epoch = sql.lease_of_row(row)
    if current is not None and not may_take_lease(current, expiry, holder, now, this_host=host):
        raise SessionLocked(str(key), str(current))
    if current != holder:  # a new holder: a new epoch (the row keeps the last one)
        epoch += 1
    params = (
        *sql.session_params(key),
        *(holder.host, holder.pid, holder.token, holder.started),
        *(sql.timestamp(now), sql.timestamp(expires_at), epoch),
    )
    conn.execute(sql.WRITE_LEASE, params)
    (log_seq,) = conn.execute(sql.MAX_SEQ).fetchone()
    return Lease(key, holder, expires_at, log_seq=log_seq, epoch=epoch)


def renew_one(
    conn: sqlite3.Connection, *, lease: Lease, now: datetime, expires_at: datetime
) -> Lease:
    """Renew ``lease`` inside the caller's transaction, or raise :class:`LeaseLost` (saying
    who holds the session now) when it is no longer its holder's at its epoch."""
    renewed = renew_all(conn, [lease], now, expires_at)
    if not renewed:
        row = conn.execute(sql.SELECT_LEASE, sql.session_params(lease.key)).fetchone()
        raise LeaseLost(str(lease.key), sql.lost_detail(row))
    return renewed[0]


@attrs.frozen
class ClaimAsk:
    """What a claim asks for: up to ``limit`` sessions due by ``wake`` (and crashed ones with
    ``interrupted``), for ``holder`` until ``expires_at``; ``now`` on the store's clock."""

    wake: datetime
    holder: LeaseHolder
    now: datetime
    expires_at: datetime
    limit: int
    interrupted: bool
    host: str


def claim(conn: sqlite3.Connection, ask: ClaimAsk) -> list[Claim]:
    """Take the lease of the sessions ``ask`` may have, inside the caller's transaction.

    Each gets the next epoch of its lease row: a claim is always a new holding.
    """
    picked = _unheld(conn, ask)
    if not picked:
        return []
    holder = ask.holder
    (log_seq,) = conn.execute(sql.MAX_SEQ).fetchone()
    stamps = (sql.timestamp(ask.now), sql.timestamp(ask.expires_at))
    who = (holder.host, holder.pid, holder.token, holder.started)
    claims: list[Claim] = []
    for row, epoch in picked:
        summary = sql.summary_from_row((*row[: sql.CLAIM_LEASE_AT], *who[:3]))
        conn.execute(sql.WRITE_LEASE, (*sql.session_params(summary.key), *who, *stamps, epoch))
        lease = Lease(summary.key, holder, ask.expires_at, log_seq=log_seq, epoch=epoch)
        claims.append(Claim(summary, lease))
    return claims


def _unheld(conn: sqlite3.Connection, ask: ClaimAsk) -> list[tuple[Sequence[Any], int]]:
    """The candidate rows nobody holds, in claim order, at most ``ask.limit``, each with the
    epoch its claim gets. All are read before anything is written."""
    params = {"wake": sql.timestamp(ask.wake), "now": sql.timestamp(ask.now), "host": ask.host}
    alive = functools.cache(process_alive)  # a daemon holds many: one look per process
    picked: list[tuple[Sequence[Any], int]] = []
    for statement in (sql.CLAIM_DUE, sql.CLAIM_INTERRUPTED)[: 1 + ask.interrupted]:
        if len(picked) >= ask.limit:
            break
        cursor = conn.execute(statement, params)
        for row in cursor:
            current, expiry, epoch = sql.lease_of_row(row[sql.CLAIM_LEASE_AT :])
            if lease_gone(current, expiry, ask.now, this_host=ask.host, alive=alive):
                picked.append((row, epoch + 1))
                if len(picked) >= ask.limit:
                    break
        cursor.close()
    return picked


def renew_all(
    conn: sqlite3.Connection, leases: Sequence[Lease], now: datetime, expires_at: datetime
) -> list[Lease]:
    """Renew each lease still its holder's at its epoch, inside the caller's transaction; the
    renewed ones, in the order given."""
    stamps = (sql.timestamp(now), sql.timestamp(expires_at))
    renewed: list[Lease] = []
    for lease in leases:
        ours = (lease.holder.token, lease.epoch)
        cursor = conn.execute(sql.RENEW_LEASE, (*stamps, *sql.session_params(lease.key), *ours))
        if cursor.rowcount == 1:
            renewed.append(attrs.evolve(lease, expires_at=expires_at))
    return renewed


def add_token(conn: sqlite3.Connection, *, record: TokenRecord) -> None:
    """Insert a token, or raise :class:`TokenExists` (its name, or its digest, is taken)."""
    if conn.execute(sql.INSERT_TOKEN, sql.token_params(record)).fetchone() is None:
        if conn.execute(sql.TOKEN_NAMED, (record.name,)).fetchone() is not None:
            raise TokenExists(record.name)
        raise TokenExists(record.name, SECRET_REUSED)


def revoke_token(conn: sqlite3.Connection, *, name: str, now: datetime) -> TokenRecord:
    """Revoke the token ``name`` at ``now`` (a revoked one keeps its time); the token now, or
    :class:`UnknownToken`."""
    row = conn.execute(sql.REVOKE_TOKEN, (sql.timestamp(now), name)).fetchone()
    if row is None:
        raise UnknownToken(name)
    return sql.token_from_row(row)
