"""What SqliteEventLog runs on its writer thread, inside one transaction: inserts, the lease
fence, releases, session ids and the schema migration."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from . import _schema as sql
from ._errors import LeaseLost
from ._events import Event, EventKind, SessionKey
from ._rules import control_marks
from ._store import Lease

#: A summary update: its statement, and its parameters between the event's seq and the sid.
SummaryUpdate = tuple[str, tuple[Any, ...]]


def version(conn: sqlite3.Connection) -> str:
    """The store schema version the file says it has (``"none"`` when it does not say)."""
    row = conn.execute(sql.GET_VERSION).fetchone()
    return "none" if row is None else str(row[0])


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
            paused, stopped = control_marks(event.payload)
            if stopped:
                updates[len(rows) - 1] = (sql.MARK_STOPPED, ())
            elif paused is not None:
                updates[len(rows) - 1] = (sql.MARK_PAUSED, (int(paused),))
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
