"""The SQLite schema of SqliteEventLog, its statements, and the row <-> value conversions."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .. import _summary_rows as rows
from .._errors import CorruptEvent
from .._events import Event, EventKind, SessionKey
from .._rules import as_utc, summary_of
from .._store import TokenRecord
from .._summary_rows import Decoding
from ..codec import decode_payload, encode_payload

#: The version of the tables below, kept in ``meta``; a newer file is refused, never rewritten.
#: Version 2 keys events by an integer session id (``sessions.sid``) instead of three text
#: columns, and finds a session's latest checkpoint through ``sessions.checkpoint_seq``.
#: Version 3 adds the lease's epoch and its holder's start time, and the summary's paused and
#: stopped flags. Version 4 adds the summary's unpriced flag, version 5 its input tokens and
#: cached input tokens, version 6 the API's tokens. An older file is migrated in place when
#: opened, one version at a time (:data:`MIGRATIONS`).
STORE_VERSION = 6

#: The page size of a new file. Every commit writes each page it touched to the WAL in full, and
#: the WAL is synced and copied back at each checkpoint: an append of a few small events touches
#: two pages (the events table and its session index), so small pages write less per commit.
PAGE_SIZE = 2048

#: WAL pages after which a commit copies the WAL back into the file (syncing both): SQLite's
#: default of 1000 pages is 4 MiB of its default 4 KiB pages; this keeps the 4 MiB, so that the
#: fixed cost of each such checkpoint is spread over as many commits as by default.
WAL_AUTOCHECKPOINT = 4 * 1024 * 1024 // PAGE_SIZE

#: The HTTP API's tokens: a name (unique for good), a scope, the app it is limited to (NULL:
#: every app), times as ISO text (NULL: never expires, not revoked), and the SHA-256 of the
#: secret as hex (never the secret), unique and indexed: a request's token is found by it.
TOKENS_TABLE = """
CREATE TABLE IF NOT EXISTS tokens (
    name TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    app TEXT,
    digest TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT
)"""

# ``events.seq`` is the rowid, so a new event gets the largest seq so far plus one: rows are
# never deleted, hence seqs only grow (AUTOINCREMENT would cost one more page per commit).
SCHEMA_SCRIPT = f"""
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    sid INTEGER PRIMARY KEY,
    app TEXT NOT NULL,
    user TEXT NOT NULL,
    session_id TEXT NOT NULL,
    checkpoint_seq INTEGER,
    turns INTEGER,
    cost_usd REAL,
    stop_reason TEXT,
    next_wake_at TEXT,
    updated_at TEXT,
    paused INTEGER NOT NULL DEFAULT 0,
    stopped INTEGER NOT NULL DEFAULT 0,
    unpriced INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    cached_input_tokens INTEGER NOT NULL DEFAULT 0,
    UNIQUE (app, user, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_by_wake ON sessions (next_wake_at)
    WHERE stop_reason = 'deferred';
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    sid INTEGER NOT NULL REFERENCES sessions (sid),
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    author TEXT NOT NULL,
    at TEXT NOT NULL,
    v INTEGER NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_session ON events (sid, seq);
CREATE TABLE IF NOT EXISTS leases (
    app TEXT NOT NULL,
    user TEXT NOT NULL,
    session_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    token TEXT NOT NULL,
    heartbeat TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    started TEXT NOT NULL DEFAULT '',
    epoch INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (app, user, session_id)
);
{TOKENS_TABLE};
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '{STORE_VERSION}');
COMMIT;
"""

# A lease row is kept once written, so that its epoch only ever grows: a released lease is a
# row without a holder (an empty token; an empty expiry, before every time).
#
# Version 2 to 3, run in one transaction: every column added has a default that is right for
# what version 2 wrote (no epochs yet, no start times, no paused or stopped checkpoints).
MIGRATE_2_TO_3 = (
    "ALTER TABLE sessions ADD COLUMN paused INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE sessions ADD COLUMN stopped INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE leases ADD COLUMN started TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0",
    "UPDATE meta SET value = '3' WHERE key = 'schema_version'",
)
# Version 3 to 4: a version 3 file recorded no prices, so its sessions count as priced.
MIGRATE_3_TO_4 = (
    "ALTER TABLE sessions ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0",
    "UPDATE meta SET value = '4' WHERE key = 'schema_version'",
)
# Version 4 to 5: the token columns, backfilled from each session's latest checkpoint (one
# lookup by rowid per session). A checkpoint row that is not valid JSON is left at 0 (reading
# it fails loudly elsewhere); a field the payload omits was its default, 0.
MIGRATE_4_TO_5 = (
    "ALTER TABLE sessions ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE sessions ADD COLUMN cached_input_tokens INTEGER NOT NULL DEFAULT 0",
    """
UPDATE sessions SET (input_tokens, cached_input_tokens) = (
    SELECT coalesce(json_extract(e.payload, '$.input_tokens'), 0),
           coalesce(json_extract(e.payload, '$.cached_input_tokens'), 0)
    FROM events AS e WHERE e.seq = sessions.checkpoint_seq
)
WHERE EXISTS (
    SELECT 1 FROM events AS e WHERE e.seq = sessions.checkpoint_seq AND json_valid(e.payload)
)
""",
    "UPDATE meta SET value = '5' WHERE key = 'schema_version'",
)
# Version 5 to 6: the tokens table (a version 5 file had no tokens).
MIGRATE_5_TO_6 = (TOKENS_TABLE, "UPDATE meta SET value = '6' WHERE key = 'schema_version'")
#: The migration of each older version to the next, all run in the one transaction that opens
#: an older file.
MIGRATIONS = {
    "2": MIGRATE_2_TO_3,
    "3": MIGRATE_3_TO_4,
    "4": MIGRATE_4_TO_5,
    "5": MIGRATE_5_TO_6,
}

HAS_META = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
GET_VERSION = "SELECT value FROM meta WHERE key = 'schema_version'"

_SESSION = "app = ? AND user = ? AND session_id = ?"
_SID = f"(SELECT sid FROM sessions WHERE {_SESSION})"
_EVENT_COLUMNS = "seq, id, kind, author, at, v, payload"

SELECT_SID = f"SELECT sid FROM sessions WHERE {_SESSION}"
INSERT_SESSION = "INSERT INTO sessions (app, user, session_id) VALUES (?, ?, ?)"

INSERT_EVENT = (
    "INSERT INTO events (sid, id, kind, author, at, v, payload) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
#: A stop or a pause/resume request appended after the latest checkpoint marks the summary
#: (parameters: the request's seq, then the flag for MARK_PAUSED, then the sid); see
#: ``_rules.control_marks``. A session without a checkpoint takes every request (its first
#: checkpoint says the rest).
MARK_STOPPED = "UPDATE sessions SET stopped = 1 WHERE coalesce(checkpoint_seq, 0) < ?1 AND sid = ?2"
MARK_PAUSED = "UPDATE sessions SET paused = ?2 WHERE coalesce(checkpoint_seq, 0) < ?1 AND sid = ?3"
#: A wake request appended after the latest checkpoint moves the wake time of a session that
#: checkpoint deferred (and that is not stopped) to the request's time, when that is earlier:
#: ``_rules.woken_wake`` in SQL (parameters: the request's seq, its time, the sid). The stopped
#: flag says whether the checkpoint or a stop request before this one stopped the session.
#: A session without a checkpoint has no stop reason: nothing to wake.
MARK_WOKEN = """
UPDATE sessions SET next_wake_at = ?2
WHERE coalesce(checkpoint_seq, 0) < ?1 AND sid = ?3 AND stop_reason = 'deferred' AND stopped = 0
    AND (next_wake_at IS NULL OR ?2 < next_wake_at)
"""
UPDATE_SUMMARY = """
UPDATE sessions SET
    checkpoint_seq = ?, turns = ?, cost_usd = ?, stop_reason = ?, next_wake_at = ?, updated_at = ?,
    paused = ?, stopped = ?, unpriced = ?, input_tokens = ?, cached_input_tokens = ?
WHERE sid = ?
"""

#: The kinds this code knows, as an SQL list. A read filtered by kind also fetches the rows of
#: every other kind (a newer release's, or a damaged row) so that decoding them fails loudly:
#: a filter must never make a row this code cannot read vanish from a resume in silence.
KNOWN_KINDS = ", ".join(f"'{kind}'" for kind in EventKind)
#: The kind filter, to format with the wanted kinds' placeholders.
KIND_FILTER = f" AND (kind IN ({{}}) OR kind NOT IN ({KNOWN_KINDS}))"

SELECT_EVENTS = f"SELECT {_EVENT_COLUMNS} FROM events WHERE sid = {_SID} AND seq > ?"
SELECT_LAST = f"SELECT {_EVENT_COLUMNS} FROM events WHERE sid = {_SID}" + KIND_FILTER
COUNT_EVENTS = f"SELECT COUNT(*) FROM events WHERE sid = {_SID}"
SELECT_CHECKPOINT = """
SELECT e.seq, e.id, e.kind, e.author, e.at, e.v, e.payload
FROM sessions AS s JOIN events AS e ON e.seq = s.checkpoint_seq
WHERE s.app = ? AND s.user = ? AND s.session_id = ?
"""

_SUMMARY_SELECT = """
SELECT s.app, s.user, s.session_id, s.turns, s.cost_usd, s.stop_reason, s.next_wake_at,
       s.updated_at, s.checkpoint_seq, s.paused, s.stopped, s.unpriced, s.input_tokens,
       s.cached_input_tokens, l.host, l.pid, l.token
FROM sessions AS s LEFT JOIN leases AS l
    ON l.app = s.app AND l.user = s.user AND l.session_id = s.session_id AND l.expires_at > ?
"""
#: The summary columns of a session ``s`` as listed, whether or not it has a checkpoint: one
#: without has no turns, no cost, checkpoint seq 0, and the time of its newest event ``last``.
LISTED_SUMMARY = """s.app, s.user, s.session_id, coalesce(s.turns, 0), coalesce(s.cost_usd, 0.0),
       s.stop_reason, s.next_wake_at, coalesce(s.updated_at, last.at),
       coalesce(s.checkpoint_seq, 0), s.paused, s.stopped, s.unpriced, s.input_tokens,
       s.cached_input_tokens"""
#: Every session that has an event, as summary rows, each followed by its latest checkpoint
#: row's schema version and payload (a rowid lookup): a session without a checkpoint (no turns,
#: no cost, checkpoint seq 0) at the time of its newest event (one descent of the events'
#: (sid, seq) index). Newest first: by the latest checkpoint's seq, else the newest event's.
#: The parameter: the store's clock (a lease expired by then has no holder).
SELECT_SESSIONS = f"""
SELECT {LISTED_SUMMARY}, l.host, l.pid, l.token, c.v, c.payload
FROM sessions AS s
LEFT JOIN events AS c ON c.seq = s.checkpoint_seq
LEFT JOIN events AS last ON last.seq = CASE WHEN s.checkpoint_seq IS NULL
    THEN (SELECT max(e.seq) FROM events AS e WHERE e.sid = s.sid) END
LEFT JOIN leases AS l
    ON l.app = s.app AND l.user = s.user AND l.session_id = s.session_id AND l.expires_at > ?
WHERE s.checkpoint_seq IS NOT NULL OR last.seq IS NOT NULL
ORDER BY coalesce(s.checkpoint_seq, last.seq) DESC
"""
SELECT_DUE = (
    _SUMMARY_SELECT
    + " WHERE s.stop_reason = 'deferred' AND s.next_wake_at <= ? AND s.stopped = 0"
    + " ORDER BY s.next_wake_at, s.checkpoint_seq"
)

#: The candidates of a claim: each session's summary, then its lease row (``SELECT_LEASE``'s
#: columns; NULLs, epoch 0, when it never had one). Named parameters: ``wake`` (what is due by
#: then), ``now`` (the store's clock: a lease expired by then is free) and ``host`` (this host:
#: its holders may be gone, which only their process table tells, so they are left to check).
_CLAIM_SELECT = """
SELECT s.app, s.user, s.session_id, s.turns, s.cost_usd, s.stop_reason, s.next_wake_at,
       s.updated_at, s.checkpoint_seq, s.paused, s.stopped, s.unpriced, s.input_tokens,
       s.cached_input_tokens, l.host, l.pid, l.token, l.started, l.expires_at, coalesce(l.epoch, 0)
FROM sessions AS s LEFT JOIN leases AS l
    ON l.app = s.app AND l.user = s.user AND l.session_id = s.session_id
WHERE s.stopped = 0 AND s.paused = 0
    AND (l.token IS NULL OR l.token = '' OR l.expires_at <= :now OR l.host = :host)
"""
#: Due sessions not held, earliest wake first (through ``sessions_by_wake``).
CLAIM_DUE = (
    _CLAIM_SELECT
    + " AND s.stop_reason = 'deferred' AND s.next_wake_at <= :wake"
    + " ORDER BY s.next_wake_at, s.checkpoint_seq"
)
#: Sessions whose run died (a checkpoint without a stop reason) not held, oldest first.
CLAIM_INTERRUPTED = (
    _CLAIM_SELECT
    + " AND s.checkpoint_seq IS NOT NULL AND s.stop_reason IS NULL"
    + " ORDER BY s.updated_at, s.checkpoint_seq"
)
#: How many columns a summary row has before its holder's (host, pid, token).
SUMMARY_WIDTH = 14
#: Where a :data:`CLAIM_DUE` row's lease columns begin.
CLAIM_LEASE_AT = SUMMARY_WIDTH

SELECT_LEASE = f"SELECT host, pid, token, started, expires_at, epoch FROM leases WHERE {_SESSION}"
WRITE_LEASE = """
INSERT INTO leases (app, user, session_id, host, pid, token, started, heartbeat, expires_at, epoch)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (app, user, session_id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, token = excluded.token,
    started = excluded.started, heartbeat = excluded.heartbeat,
    expires_at = excluded.expires_at, epoch = excluded.epoch
"""
RENEW_LEASE = (
    f"UPDATE leases SET heartbeat = ?, expires_at = ? WHERE {_SESSION} AND token = ? AND epoch = ?"
)
RELEASE_LEASE = (
    "UPDATE leases SET host = '', pid = 0, token = '', started = '', expires_at = ''"
    f" WHERE {_SESSION} AND token = ? AND epoch = ?"
)
MAX_SEQ = "SELECT coalesce(max(seq), 0) FROM events"  # the rowid's max: one b-tree descent

_TOKEN_COLUMNS = "name, scope, digest, created_at, app, expires_at, revoked_at"
#: A new token; a name or digest the table has already inserts nothing (no row returned).
INSERT_TOKEN = f"""
INSERT INTO tokens ({_TOKEN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING RETURNING name
"""
TOKEN_NAMED = "SELECT 1 FROM tokens WHERE name = ?"
SELECT_TOKENS = f"SELECT {_TOKEN_COLUMNS} FROM tokens ORDER BY created_at, rowid"
#: Revoke a token (one revoked already keeps its time); its row, none for an unknown name.
REVOKE_TOKEN = f"""
UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE name = ?
RETURNING {_TOKEN_COLUMNS}
"""
TOKEN_BY_DIGEST = f"SELECT {_TOKEN_COLUMNS} FROM tokens WHERE digest = ?"


def timestamp(moment: datetime) -> str:
    """A UTC time as fixed-width ISO text, so that text order is time order."""
    return as_utc(moment).isoformat(timespec="microseconds")


def session_params(key: SessionKey) -> tuple[str, str, str]:
    """The (app, user, session_id) parameters of a session."""
    return (key.app, key.user, key.session_id)


def event_row(sid: int | SessionKey, event: Event) -> tuple[Any, ...]:
    """The INSERT parameters of one event (the payload encoded as JSON).

    ``sid`` is the session's id, or its key when the id is not known yet (the writer looks it
    up, or adds the session, in the append's transaction).
    """
    return (
        sid,
        event.id,
        str(event.kind),
        event.author,
        event.at.isoformat(),
        event.v,
        encode_payload(event.payload),
    )


def checkpoint_params(event: Event) -> tuple[Any, ...]:
    """The summary a checkpoint leaves, as UPDATE parameters after ``checkpoint_seq``.

    Raises :class:`TypeError` when the event's payload is not a checkpoint.
    """
    summary = summary_of(event)
    wake = summary.next_wake_at
    return (
        summary.turns,
        summary.cost_usd,
        summary.stop_reason,
        None if wake is None else timestamp(wake),
        timestamp(summary.updated_at),
        int(summary.paused),
        int(summary.stopped),
        int(summary.unpriced),
        summary.input_tokens,
        summary.cached_input_tokens,
    )


def event_from_row(row: Sequence[Any], key: SessionKey) -> Event:
    """The event of session ``key`` stored in ``row``; an unreadable row raises
    :class:`CorruptEvent`."""
    seq, event_id, kind, author, at, v, payload = row
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


def token_params(record: TokenRecord) -> tuple[Any, ...]:
    """The :data:`INSERT_TOKEN` parameters of a token."""
    return (
        record.name,
        record.scope,
        record.digest,
        timestamp(record.created_at),
        record.app,
        None if record.expires_at is None else timestamp(record.expires_at),
        None if record.revoked_at is None else timestamp(record.revoked_at),
    )


def token_from_row(row: Sequence[Any]) -> TokenRecord:
    """The token of a tokens row (its columns in :data:`SELECT_TOKENS`' order)."""
    name, scope, digest, created_at, app, expires_at, revoked_at = row
    return TokenRecord(
        name=name,
        scope=scope,
        digest=digest,
        created_at=moment(created_at),
        app=app,
        expires_at=None if expires_at is None else moment(expires_at),
        revoked_at=None if revoked_at is None else moment(revoked_at),
    )


def moment(text: str) -> datetime:
    """A stored time (ISO 8601 text) in UTC: a summary's (UTC already) or an event's (in the
    zone it was given in; naive text is UTC)."""
    return as_utc(datetime.fromisoformat(text))


#: How this store's columns read back: text as stored, times as ISO 8601 text.
DECODING = Decoding(text=str, time=moment)
#: A session summary from a sessions/leases row (see
#: :func:`~eventlog._summary_rows.summary_from_row`).
summary_from_row = functools.partial(rows.summary_from_row, decoding=DECODING)
#: A :data:`SELECT_SESSIONS` row as the summary it lists, with its checkpoint.
listed_from_row = functools.partial(rows.listed_from_row, decoding=DECODING)
#: A :data:`SELECT_LEASE` row as (holder, expiry, epoch).
lease_of_row = functools.partial(rows.lease_of_row, decoding=DECODING)
#: Why a lease is no longer ours, from the session's :data:`SELECT_LEASE` row.
lost_detail = functools.partial(rows.lost_detail, decoding=DECODING)
