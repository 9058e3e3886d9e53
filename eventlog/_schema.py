"""The SQLite schema of SqliteEventLog, its statements, and the row <-> value conversions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ._codec import decode_payload, encode_payload
from ._errors import CorruptEvent
from ._events import Event, EventKind, SessionKey
from ._rules import as_utc
from ._store import LeaseHolder, SessionSummary

#: The version of the tables below, kept in ``meta``; a newer file is refused, never rewritten.
STORE_VERSION = 1

SCHEMA_SCRIPT = f"""
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL,
    app TEXT NOT NULL,
    user TEXT NOT NULL,
    session_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    at TEXT NOT NULL,
    v INTEGER NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_session ON events (app, user, session_id, seq);
CREATE INDEX IF NOT EXISTS events_checkpoints ON events (app, user, session_id, seq)
    WHERE kind = 'checkpoint';
CREATE TABLE IF NOT EXISTS sessions (
    app TEXT NOT NULL,
    user TEXT NOT NULL,
    session_id TEXT NOT NULL,
    checkpoint_seq INTEGER NOT NULL,
    turns INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    stop_reason TEXT,
    next_wake_at TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (app, user, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_by_wake ON sessions (next_wake_at)
    WHERE stop_reason = 'deferred';
CREATE TABLE IF NOT EXISTS leases (
    app TEXT NOT NULL,
    user TEXT NOT NULL,
    session_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    token TEXT NOT NULL,
    heartbeat TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (app, user, session_id)
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '{STORE_VERSION}');
COMMIT;
"""

HAS_META = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
GET_VERSION = "SELECT value FROM meta WHERE key = 'schema_version'"

_EVENT_COLUMNS = "seq, id, app, user, session_id, kind, author, at, v, payload"
_SESSION = "app = ? AND user = ? AND session_id = ?"

SELECT_EVENTS = f"SELECT {_EVENT_COLUMNS} FROM events WHERE {_SESSION} AND seq > ?"
SELECT_LAST = f"SELECT {_EVENT_COLUMNS} FROM events WHERE {_SESSION} AND kind IN ({{}})"
SELECT_CHECKPOINT = (
    f"SELECT {_EVENT_COLUMNS} FROM events INDEXED BY events_checkpoints"
    f" WHERE {_SESSION} AND kind = 'checkpoint' ORDER BY seq DESC LIMIT 1"
)

UPSERT_SESSION = """
INSERT INTO sessions
    (app, user, session_id, checkpoint_seq, turns, cost_usd, stop_reason, next_wake_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (app, user, session_id) DO UPDATE SET
    checkpoint_seq = excluded.checkpoint_seq, turns = excluded.turns,
    cost_usd = excluded.cost_usd, stop_reason = excluded.stop_reason,
    next_wake_at = excluded.next_wake_at, updated_at = excluded.updated_at
"""

_SUMMARY_SELECT = """
SELECT s.app, s.user, s.session_id, s.turns, s.cost_usd, s.stop_reason, s.next_wake_at,
       s.updated_at, s.checkpoint_seq, l.host, l.pid, l.token
FROM sessions AS s LEFT JOIN leases AS l
    ON l.app = s.app AND l.user = s.user AND l.session_id = s.session_id AND l.expires_at > ?
"""
SELECT_SESSIONS = _SUMMARY_SELECT + " ORDER BY s.checkpoint_seq DESC"
SELECT_DUE = (
    _SUMMARY_SELECT
    + " WHERE s.stop_reason = 'deferred' AND s.next_wake_at <= ?"
    + " ORDER BY s.next_wake_at, s.checkpoint_seq"
)

SELECT_LEASE = f"SELECT host, pid, token, expires_at FROM leases WHERE {_SESSION}"
WRITE_LEASE = """
INSERT INTO leases (app, user, session_id, host, pid, token, heartbeat, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (app, user, session_id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, token = excluded.token,
    heartbeat = excluded.heartbeat, expires_at = excluded.expires_at
"""
RENEW_LEASE = (
    f"UPDATE leases SET heartbeat = ?, expires_at = ?"
    f" WHERE {_SESSION} AND host = ? AND pid = ? AND token = ?"
)
RELEASE_LEASE = f"DELETE FROM leases WHERE {_SESSION} AND token = ?"

INSERT_EVENT = (
    "INSERT INTO events (id, app, user, session_id, kind, author, at, v, payload)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def timestamp(moment: datetime) -> str:
    """A UTC time as fixed-width ISO text, so that text order is time order."""
    return as_utc(moment).isoformat(timespec="microseconds")


def session_params(key: SessionKey) -> tuple[str, str, str]:
    """The (app, user, session_id) parameters of a session."""
    return (key.app, key.user, key.session_id)


def event_params(event: Event) -> tuple[Any, ...]:
    """The INSERT parameters of one event (the payload encoded as JSON)."""
    key = event.key
    return (
        event.id,
        key.app,
        key.user,
        key.session_id,
        str(event.kind),
        event.author,
        event.at.isoformat(),
        event.v,
        encode_payload(event.payload),
    )


def summary_params(summary: SessionSummary) -> tuple[Any, ...]:
    """The UPSERT parameters of a session summary."""
    wake = summary.next_wake_at
    return (
        *session_params(summary.key),
        summary.checkpoint_seq,
        summary.turns,
        summary.cost_usd,
        summary.stop_reason,
        None if wake is None else timestamp(wake),
        timestamp(summary.updated_at),
    )


def event_from_row(row: Sequence[Any], key: SessionKey | None = None) -> Event:
    """The event stored in ``row``; an unreadable row raises :class:`CorruptEvent`."""
    seq, event_id, app, user, session_id, kind, author, at, v, payload = row
    key = key if key is not None else SessionKey(app, user, session_id)
    session = str(key)
    decoded = decode_payload(kind, payload, v=v, session=session, seq=seq, event_id=event_id)
    try:
        moment = datetime.fromisoformat(at)
    except (TypeError, ValueError) as exc:
        raise CorruptEvent(session, seq, event_id, f"unreadable time {at!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return Event(
        key=key,
        kind=EventKind(kind),
        payload=decoded,
        author=author,
        at=moment,
        id=event_id,
        seq=seq,
        v=v,
    )


def summary_from_row(row: Sequence[Any]) -> SessionSummary:
    """A session summary (with its live lease holder, if any) from a sessions/leases row."""
    app, user, session_id, turns, cost, reason, wake, updated, seq, host, pid, token = row
    return SessionSummary(
        key=SessionKey(app, user, session_id),
        turns=turns,
        cost_usd=cost,
        stop_reason=reason,
        next_wake_at=None if wake is None else datetime.fromisoformat(wake),
        updated_at=datetime.fromisoformat(updated),
        checkpoint_seq=seq,
        holder=None if host is None else str(LeaseHolder(host, pid, token)),
    )
