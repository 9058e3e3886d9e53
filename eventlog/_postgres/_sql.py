"""PostgresEventLog's schema, every SQL statement it runs but its prune's (those are in
_prune.py, as SQLite's are in _sqlite/_prune.py), how it stores text, and its rows read back:
events, session summaries, leases, claims and tokens (as _schema is SQLite's)."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs
from psycopg import sql as psql

from .. import _summary_rows as rows
from .._events import Event, EventKind, SessionKey
from .._rules import as_utc
from .._store import LeaseHolder, SessionSummary, TokenRecord
from .._summary_rows import Decoding
from ..codec import decode_payload

# -- how text is stored: the NUL character -------------------------------------------------
# PostgreSQL text cannot hold U+0000, which a session key or an author may. Such text is
# stored with it escaped as DLE "0" (and DLE itself doubled); any other text is stored as is.
_DLE = "\x10"
_UNESCAPE = re.compile("\x10(.)", re.DOTALL)


def escape(text: str) -> str:
    """``text`` as a text column stores it (see above)."""
    if "\x00" not in text and _DLE not in text:
        return text
    return text.replace(_DLE, _DLE + _DLE).replace("\x00", _DLE + "0")


def unescape(text: str) -> str:
    """The text :func:`escape` stored as ``text``."""
    if _DLE not in text:
        return text
    return _UNESCAPE.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), text)


def key_params(key: SessionKey) -> dict[str, str]:
    """The (app, user, session_id) parameters of a session."""
    return {"app": escape(key.app), "user": escape(key.user), "session_id": escape(key.session_id)}


def key_of(app: str, user: str, session_id: str) -> SessionKey:
    """The session key of a row's three key columns."""
    return SessionKey(unescape(app), unescape(user), unescape(session_id))


# -- notifications -------------------------------------------------------------------------
# A notification names its session by a digest of the key, never the key itself: pg_notify
# refuses a payload of 8,000 bytes or more, inside the statement that writes, and a long key
# would make one. The digest is SHA-256 over the SHA-256 of each key column as stored (U+0000
# escaped), so that the parts are told apart; the server makes the same from a session row
# (:data:`NOTICE_OF_ROW`). Two keys with one digest only wake a watch for nothing (it re-reads).

#: The notice of the session row ``s`` (its stored key columns), in SQL: what :func:`notice`
#: makes of its key.
NOTICE_OF_ROW = """encode(sha256(
    sha256(convert_to(s.app, 'UTF8')) || sha256(convert_to(s."user", 'UTF8'))
    || sha256(convert_to(s.session_id, 'UTF8'))
), 'hex')"""

_NOTICE = re.compile("[0-9a-f]{64}")


def notice(key: SessionKey) -> str:
    """A session's notification payload: 64 hex digits, a digest of its key (see above)."""
    parts = (escape(key.app), escape(key.user), escape(key.session_id))
    # surrogatepass: a key with a lone surrogate fails where it is stored, not here
    inner = b"".join(
        hashlib.sha256(part.encode("utf-8", "surrogatepass")).digest() for part in parts
    )
    return hashlib.sha256(inner).hexdigest()


def is_notice(payload: str) -> bool:
    """Whether a notification payload is a session's notice (one this code wrote), not
    something else sent on the channel (an older release's key, say)."""
    return _NOTICE.fullmatch(payload) is not None


# -- the schema and the statements ---------------------------------------------------------

#: The version of the tables below, kept in ``eventlog_meta``; a newer schema is refused, never
#: rewritten. An older one is migrated when opened, one version at a time (:data:`MIGRATIONS`).
STORE_VERSION = 4

# Version 1 to 2: the events' foreign key on their session goes. It checked nothing the
# statements do not (an append inserts only rows of sessions it has locked, and a session row
# is never deleted), and it cost each inserted row a trigger and a lookup of its session.
MIGRATE_1_TO_2 = (
    "ALTER TABLE eventlog_events DROP CONSTRAINT IF EXISTS eventlog_events_sid_fkey",
    "UPDATE eventlog_meta SET value = '2' WHERE key = 'schema_version'",
)

# Version 2 to 3: the summary's token columns, backfilled from each session's latest checkpoint:
# all in one statement, or, when a checkpoint row is not JSON (reading it fails loudly
# elsewhere), one session at a time, each in a block of its own, so that only that session
# stays at 0 until its next checkpoint (as SQLite's migration leaves it), and the schema opens.
_BACKFILL_TOKENS = """
UPDATE eventlog_sessions AS s SET
    input_tokens = coalesce((e.payload::json->>'input_tokens')::bigint, 0),
    cached_input_tokens = coalesce((e.payload::json->>'cached_input_tokens')::bigint, 0)
FROM eventlog_events AS e WHERE e.sid = s.sid AND e.seq = s.checkpoint_seq"""
MIGRATE_2_TO_3 = (
    """
ALTER TABLE eventlog_sessions ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN cached_input_tokens bigint NOT NULL DEFAULT 0""",
    f"""
DO $$
DECLARE one record;
BEGIN
    {_BACKFILL_TOKENS};
EXCEPTION WHEN data_exception THEN
    FOR one IN SELECT sid FROM eventlog_sessions WHERE checkpoint_seq IS NOT NULL LOOP
        BEGIN
            {_BACKFILL_TOKENS} AND s.sid = one.sid;
        EXCEPTION WHEN data_exception THEN NULL;
        END;
    END LOOP;
END $$""",
    "UPDATE eventlog_meta SET value = '3' WHERE key = 'schema_version'",
)

#: The HTTP API's tokens: a name (unique for good), a scope, the app it is limited to (NULL:
#: every app), its times (NULL: never expires, not revoked), and the SHA-256 of the secret as
#: hex (never the secret), unique and indexed: a request's token is found by it. Text as
#: :func:`escape` stores it.
TOKENS_TABLE = """
CREATE TABLE IF NOT EXISTS eventlog_tokens (
    name text PRIMARY KEY,
    scope text NOT NULL,
    app text,
    digest text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz
)"""

# Version 3 to 4: the tokens table (a version 3 schema had no tokens).
MIGRATE_3_TO_4 = (TOKENS_TABLE, "UPDATE eventlog_meta SET value = '4' WHERE key = 'schema_version'")

#: The statements that bring each older version to the next, run in one transaction.
MIGRATIONS: dict[str, tuple[str, ...]] = {
    "1": MIGRATE_1_TO_2,
    "2": MIGRATE_2_TO_3,
    "3": MIGRATE_3_TO_4,
}

# The lease lives on the session row (holder, epoch, expiry): the row every append locks first,
# so that an append, a claim and a takeover of one session run one after another. A released
# lease keeps its epoch, so that epochs only grow. ``next_wake_at`` is on the row too, with a
# partial index on the due ones (what claim_due scans). Events are keyed by (sid, seq): seqs
# come from one sequence, taken only once the session row is locked, so that within a session
# commit order is seq order (a reader after its last seq never misses a row).
SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS eventlog_meta (
    key text PRIMARY KEY,
    value text NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS eventlog_sessions (
    sid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app text NOT NULL,
    "user" text NOT NULL,
    session_id text NOT NULL,
    checkpoint_seq bigint,
    turns bigint,
    cost_usd double precision,
    stop_reason text,
    next_wake_at timestamptz,
    updated_at timestamptz,
    paused boolean NOT NULL DEFAULT false,
    stopped boolean NOT NULL DEFAULT false,
    unpriced boolean NOT NULL DEFAULT false,
    input_tokens bigint NOT NULL DEFAULT 0,
    cached_input_tokens bigint NOT NULL DEFAULT 0,
    holder_host text,
    holder_pid integer,
    holder_token text,
    holder_started text,
    heartbeat timestamptz,
    expires_at timestamptz,
    epoch bigint NOT NULL DEFAULT 0,
    UNIQUE (app, "user", session_id)
)""",
    """
CREATE INDEX IF NOT EXISTS eventlog_sessions_due ON eventlog_sessions (next_wake_at)
    WHERE stop_reason = 'deferred' AND NOT stopped""",
    "CREATE SEQUENCE IF NOT EXISTS eventlog_seq",
    """
CREATE TABLE IF NOT EXISTS eventlog_events (
    sid bigint NOT NULL,  -- a session's row, never deleted (see MIGRATE_1_TO_2)
    seq bigint NOT NULL,
    id text NOT NULL,
    kind text NOT NULL,
    author text NOT NULL,
    at timestamptz NOT NULL,
    v integer NOT NULL,
    payload text NOT NULL,
    PRIMARY KEY (sid, seq)
)""",
    TOKENS_TABLE,
    f"""
INSERT INTO eventlog_meta (key, value) VALUES ('schema_version', '{STORE_VERSION}')
ON CONFLICT (key) DO NOTHING""",
)

#: Serialises the creation and migration of one schema's tables between processes.
SETUP_LOCK = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.eventlog'))"
HAS_META = "SELECT to_regclass('eventlog_meta') IS NOT NULL, current_schema()"
GET_VERSION = "SELECT value FROM eventlog_meta WHERE key = 'schema_version'"

_KEY = 'app = %(app)s AND "user" = %(user)s AND session_id = %(session_id)s'

#: The session's id, the session added if it is new. A concurrent first insert of the same
#: session may leave both parts empty (its row is not in this statement's snapshot): ask again.
ENSURE_SESSION = f"""
WITH added AS (
    INSERT INTO eventlog_sessions (app, "user", session_id)
    VALUES (%(app)s, %(user)s, %(session_id)s)
    ON CONFLICT (app, "user", session_id) DO NOTHING
    RETURNING sid
)
SELECT sid FROM added UNION ALL SELECT sid FROM eventlog_sessions WHERE {_KEY}
"""
SELECT_SID = f"SELECT sid FROM eventlog_sessions WHERE {_KEY}"

#: The log's newest seq (0 before the first): every event appended to a session after its row
#: was locked by the reader gets a larger one.
_LOG_SEQ = "coalesce(pg_sequence_last_value('eventlog_seq'), 0)"

# The columns of an event row of a batch's ``events`` (a JSON list of rows, each a list:
# sid, id, kind, author, at, v, payload; see _batch.py), as a FROM item ``r``.
_EVENT_ROWS = """
json_array_elements(%(events)s::json) WITH ORDINALITY AS r (e, ord)
"""
_EVENT_VALUES = """
(r.e->>0)::bigint AS sid, r.e->>1 AS id, r.e->>2 AS kind, r.e->>3 AS author,
(r.e->>4)::timestamptz AS at, (r.e->>5)::integer AS v, r.e->>6 AS payload
"""
_FENCE = "(%(token)s::text IS NULL OR (holder_token = %(token)s AND epoch = %(epoch)s))"

# The append of most model calls (an answer, its tool calls' results): a few events of one
# session that change nothing on its row. One statement: lock the session row, fenced by the
# lease when there is one; only then take the seqs (one per event, in batch order) and insert.
# A fence that fails locks no row, so that nothing is inserted. The rows are plain parameters
# (one statement per batch size, each prepared once per connection): the server binds them as
# they are, where the JSON of APPEND is parsed again for every column of every row. The
# parameters: the session's id, the token twice (None: no fence) and the epoch, then per event
# its id, kind, author, time, schema version and payload.
ROWS_STATEMENTS = 8
_ROW = "(%s, %%s, %%s, %%s, %%s::timestamptz, %%s::integer, %%s)"
_APPEND_ROWS = """
WITH fence AS (
    SELECT sid FROM eventlog_sessions
    WHERE sid = %s AND (%s::text IS NULL OR (holder_token = %s AND epoch = %s))
    FOR UPDATE
)
INSERT INTO eventlog_events (sid, seq, id, kind, author, at, v, payload)
SELECT fence.sid, nextval('eventlog_seq'), r.id, r.kind, r.author, r.at, r.v, r.payload
FROM fence, (VALUES {rows}) AS r (ord, id, kind, author, at, v, payload)
ORDER BY r.ord
RETURNING seq
"""
#: The statement of each batch size from 1 to :data:`ROWS_STATEMENTS` (larger ones: APPEND).
APPEND_ROWS = {
    n: _APPEND_ROWS.format(rows=", ".join(_ROW % ordinal for ordinal in range(1, n + 1)))
    for n in range(1, ROWS_STATEMENTS + 1)
}

# Any other append, one statement: lock the batch's session rows (in sid order, so that two
# batches never deadlock), fenced by the lease when there is one; only then take the seqs
# (one per event, in batch order) and insert; update the summaries of the sessions the batch
# holds a checkpoint or control request of; drop the lease (append_and_release); notify. A
# fence that fails locks no row, so that nothing is inserted, updated or notified.
APPEND = f"""
WITH locked AS (
    SELECT sid FROM eventlog_sessions
    WHERE sid = ANY(%(sids)s::bigint[]) AND {_FENCE}
    ORDER BY sid
    FOR UPDATE
), batch AS (
    SELECT b.ord, b.sid, nextval('eventlog_seq') AS seq, b.id, b.kind, b.author, b.at, b.v,
           b.payload
    FROM (SELECT r.ord, {_EVENT_VALUES} FROM {_EVENT_ROWS}) AS b
    WHERE (SELECT count(*) FROM locked) = %(sessions)s
    ORDER BY b.ord
), inserted AS (
    INSERT INTO eventlog_events (sid, seq, id, kind, author, at, v, payload)
    SELECT sid, seq, id, kind, author, at, v, payload FROM batch ORDER BY ord
), changes AS MATERIALIZED (  -- once: the update reads ck_seq eleven times
    SELECT u.*, (SELECT b.seq FROM batch AS b WHERE b.ord = u.ck_ord) AS ck_seq
    FROM (
        SELECT (c->>0)::bigint AS sid, (c->>1)::bigint AS ck_ord, (c->>2)::bigint AS turns,
               (c->>3)::double precision AS cost_usd, c->>4 AS stop_reason,
               (c->>5)::timestamptz AS next_wake_at, (c->>6)::timestamptz AS updated_at,
               (c->>7)::boolean AS paused, (c->>8)::boolean AS stopped,
               (c->>9)::boolean AS unpriced, (c->>10)::bigint AS input_tokens,
               (c->>11)::bigint AS cached_input_tokens, (c->>12)::boolean AS release,
               (c->>13)::timestamptz AS woken_at
        FROM json_array_elements(%(changes)s::json) AS c
    ) AS u
    WHERE EXISTS (SELECT 1 FROM batch)
), updated AS (
    UPDATE eventlog_sessions AS s SET
        checkpoint_seq = coalesce(c.ck_seq, s.checkpoint_seq),
        turns = CASE WHEN c.ck_seq IS NULL THEN s.turns ELSE c.turns END,
        cost_usd = CASE WHEN c.ck_seq IS NULL THEN s.cost_usd ELSE c.cost_usd END,
        stop_reason = CASE WHEN c.ck_seq IS NULL THEN s.stop_reason ELSE c.stop_reason END,
        -- a wake request moves a deferred session's wake time earlier (_rules.woken_wake);
        -- s.stopped is the row's before this batch, c.woken_at none after a stop of the batch
        next_wake_at = CASE
            WHEN c.ck_seq IS NOT NULL THEN c.next_wake_at
            WHEN c.woken_at IS NOT NULL AND s.stop_reason = 'deferred' AND NOT s.stopped
                AND (s.next_wake_at IS NULL OR c.woken_at < s.next_wake_at) THEN c.woken_at
            ELSE s.next_wake_at END,
        updated_at = CASE WHEN c.ck_seq IS NULL THEN s.updated_at ELSE c.updated_at END,
        unpriced = CASE WHEN c.ck_seq IS NULL THEN s.unpriced ELSE c.unpriced END,
        input_tokens = CASE WHEN c.ck_seq IS NULL THEN s.input_tokens ELSE c.input_tokens END,
        cached_input_tokens = CASE
            WHEN c.ck_seq IS NULL THEN s.cached_input_tokens ELSE c.cached_input_tokens END,
        -- a control request marks the summary, whether or not the session has a checkpoint
        paused = CASE
            WHEN c.ck_seq IS NOT NULL THEN c.paused ELSE coalesce(c.paused, s.paused) END,
        stopped = CASE
            WHEN c.ck_seq IS NOT NULL THEN c.stopped ELSE s.stopped OR c.stopped END,
        holder_host = CASE WHEN c.release THEN NULL ELSE s.holder_host END,
        holder_pid = CASE WHEN c.release THEN NULL ELSE s.holder_pid END,
        holder_token = CASE WHEN c.release THEN NULL ELSE s.holder_token END,
        holder_started = CASE WHEN c.release THEN NULL ELSE s.holder_started END,
        expires_at = CASE WHEN c.release THEN NULL ELSE s.expires_at END
    FROM changes AS c JOIN locked AS l ON l.sid = c.sid  -- the locked rows, by their index
    WHERE s.sid = l.sid
), notified AS (
    SELECT pg_notify(%(channel)s, n) FROM json_array_elements_text(%(notify)s::json) AS n
    WHERE EXISTS (SELECT 1 FROM batch)
)
SELECT array_agg(seq ORDER BY ord), (SELECT count(*) FROM notified) FROM batch
"""

_LEASE_COLUMNS = "holder_host, holder_pid, holder_token, holder_started, expires_at, epoch"
SELECT_LEASE = f"SELECT {_LEASE_COLUMNS} FROM eventlog_sessions WHERE {_KEY}"
LOCK_LEASE = f"SELECT {_LEASE_COLUMNS} FROM eventlog_sessions WHERE sid = %(sid)s FOR UPDATE"
# The asker is the holder on the row: the same host, pid, token and start time.
_SAME_HOLDER = """(s.holder_token = excluded.holder_token AND s.holder_host = excluded.holder_host
    AND s.holder_pid = excluded.holder_pid AND s.holder_started = excluded.holder_started)"""
#: The lease of a session nobody holds (a new session, a released or expired lease, or ours
#: already), taken in one statement, the session row added if need be; the session's id,
#: the epoch and the log's newest seq. No row: a holder that is not the asker holds it
#: until after now, and whether that holder is gone is told with the row locked (LOCK_LEASE).
#: A concurrent first lease of a new session waits for the other's insert, then finds the
#: lease held. (Like ENSURE_SESSION, a conflicting insert uses up an id: ids may have gaps.)
TAKE_FREE_LEASE = f"""
INSERT INTO eventlog_sessions AS s (
    app, "user", session_id, holder_host, holder_pid, holder_token, holder_started, heartbeat,
    expires_at, epoch
) VALUES (
    %(app)s, %(user)s, %(session_id)s, %(host)s, %(pid)s, %(token)s, %(started)s, %(now)s,
    %(expires_at)s, 1
)
ON CONFLICT (app, "user", session_id) DO UPDATE SET
    holder_host = excluded.holder_host, holder_pid = excluded.holder_pid,
    holder_token = excluded.holder_token, holder_started = excluded.holder_started,
    heartbeat = excluded.heartbeat, expires_at = excluded.expires_at,
    epoch = CASE WHEN {_SAME_HOLDER} THEN s.epoch ELSE s.epoch + 1 END
WHERE s.holder_token IS NULL OR s.expires_at IS NULL OR s.expires_at <= %(now)s
    OR {_SAME_HOLDER}
RETURNING sid, epoch, {_LOG_SEQ}
"""
WRITE_LEASE = f"""
UPDATE eventlog_sessions SET
    holder_host = %(host)s, holder_pid = %(pid)s, holder_token = %(token)s,
    holder_started = %(started)s, heartbeat = %(now)s, expires_at = %(expires_at)s,
    epoch = %(epoch)s
WHERE sid = %(sid)s
RETURNING {_LOG_SEQ}
"""
RENEW_LEASE = f"""
UPDATE eventlog_sessions SET heartbeat = %(now)s, expires_at = %(expires_at)s
WHERE {_KEY} AND holder_token = %(token)s AND epoch = %(epoch)s
"""
# Many leases, in sid order (two renewals never deadlock); the renewed ones' index in the
# list given.
RENEW_LEASES = """
WITH wanted AS (
    SELECT w.ord, s.sid FROM eventlog_sessions AS s
    JOIN unnest(%(apps)s::text[], %(users)s::text[], %(session_ids)s::text[],
                %(tokens)s::text[], %(epochs)s::bigint[]) WITH ORDINALITY
        AS w (app, "user", session_id, token, epoch, ord)
        ON s.app = w.app AND s."user" = w."user" AND s.session_id = w.session_id
            AND s.holder_token = w.token AND s.epoch = w.epoch
    ORDER BY s.sid
    FOR UPDATE OF s
), renewed AS (
    UPDATE eventlog_sessions AS s SET heartbeat = %(now)s, expires_at = %(expires_at)s
    FROM (SELECT DISTINCT sid FROM wanted) AS w
    WHERE s.sid = w.sid
    RETURNING s.sid
)
SELECT w.ord FROM wanted AS w WHERE w.sid IN (SELECT sid FROM renewed)
"""
RELEASE_LEASE = f"""
WITH released AS (
    UPDATE eventlog_sessions SET
        holder_host = NULL, holder_pid = NULL, holder_token = NULL, holder_started = NULL,
        expires_at = NULL
    WHERE {_KEY} AND holder_token = %(token)s AND epoch = %(epoch)s
    RETURNING sid
)
SELECT pg_notify(%(channel)s, %(payload)s) FROM released
"""

#: The kinds this code knows, as an SQL array. A read filtered by kind also fetches the rows of
#: every other kind (a newer release's, or a damaged row) so that decoding them fails loudly:
#: a filter must never make a row this code cannot read vanish from a resume in silence.
KNOWN_KINDS = [str(kind) for kind in EventKind]
KIND_FILTER = " AND (kind = ANY(%(kinds)s::text[]) OR kind <> ALL(%(known)s::text[]))"

_EVENT_COLUMNS = "seq, id, kind, author, at, v, payload"
SELECT_EVENTS = f"SELECT {_EVENT_COLUMNS} FROM eventlog_events WHERE sid = %(sid)s"
AFTER_SEQ = " AND seq > %(after_seq)s"
COUNT_EVENTS = "SELECT count(*) FROM eventlog_events WHERE sid = %(sid)s"
SELECT_CHECKPOINT = """
SELECT e.seq, e.id, e.kind, e.author, e.at, e.v, e.payload
FROM eventlog_sessions AS s JOIN eventlog_events AS e
    ON e.sid = s.sid AND e.seq = s.checkpoint_seq
WHERE s.sid = %(sid)s
"""

# A summary row: the key, the summary, and the holder of a lease live at the clock's now.
_SUMMARY = """
s.app, s."user", s.session_id, s.turns, s.cost_usd, s.stop_reason, s.next_wake_at,
s.updated_at, s.checkpoint_seq, s.paused, s.stopped, s.unpriced, s.input_tokens,
s.cached_input_tokens"""
_SUMMARY_COLUMNS = f"""{_SUMMARY},
CASE WHEN s.expires_at > %(clock)s THEN s.holder_host END,
s.holder_pid, s.holder_token
"""
#: How many columns a summary row has before its holder's (host, pid, token).
SUMMARY_WIDTH = 14
#: The summary columns of a session ``s`` as listed, whether or not it has a checkpoint: one
#: without has no turns, no cost, checkpoint seq 0, and the time of its newest event ``last``.
LISTED_SUMMARY = """s.app, s."user", s.session_id, coalesce(s.turns, 0), coalesce(s.cost_usd, 0),
       s.stop_reason, s.next_wake_at, coalesce(s.updated_at, last.at),
       coalesce(s.checkpoint_seq, 0), s.paused, s.stopped, s.unpriced, s.input_tokens,
       s.cached_input_tokens"""
#: Every session that has an event, as summary rows, each followed by its latest checkpoint
#: row's schema version and payload: a session without a checkpoint (no turns, no cost,
#: checkpoint seq 0) at the time of its newest event (one descent of the events' primary
#: key). A session row with no event (a lease alone) is left out. Newest first: by the
#: latest checkpoint's seq, else the newest event's.
SELECT_SESSIONS = f"""
SELECT {LISTED_SUMMARY}, CASE WHEN s.expires_at > %(clock)s THEN s.holder_host END,
       s.holder_pid, s.holder_token, c.v, c.payload
FROM eventlog_sessions AS s
LEFT JOIN eventlog_events AS c ON c.sid = s.sid AND c.seq = s.checkpoint_seq
LEFT JOIN LATERAL (
    SELECT e.seq, e.at FROM eventlog_events AS e
    WHERE e.sid = s.sid AND s.checkpoint_seq IS NULL
    ORDER BY e.seq DESC LIMIT 1
) AS last ON true
WHERE s.checkpoint_seq IS NOT NULL OR last.seq IS NOT NULL
ORDER BY coalesce(s.checkpoint_seq, last.seq) DESC
"""
_DUE = "s.stop_reason = 'deferred' AND NOT s.stopped AND s.next_wake_at <= %(now)s"
SELECT_DUE = f"""
SELECT {_SUMMARY_COLUMNS} FROM eventlog_sessions AS s
WHERE {_DUE}
ORDER BY s.next_wake_at, s.checkpoint_seq
"""

# What claim_due may take: due and not paused (or, with interrupted, a checkpoint with no stop
# reason, neither stopped nor paused); not held: no holder, an expired lease, or a holder of
# this host found gone (its token in %(gone)s). The claimer's own live lease counts as held.
_INTERRUPTED = "s.checkpoint_seq IS NOT NULL AND s.stop_reason IS NULL AND NOT s.stopped"
_FREE = (
    "(s.holder_token IS NULL OR s.expires_at <= %(clock)s"
    " OR s.holder_token = ANY(%(gone)s::text[]))"
)
_CLAIMABLE = f"NOT s.paused AND (({_DUE}) OR (%(interrupted)s AND {_INTERRUPTED}))"
_CLAIM_ORDER = f"""
CASE WHEN {_DUE} THEN 0 ELSE 1 END,
CASE WHEN {_DUE} THEN s.next_wake_at ELSE s.updated_at END,
s.checkpoint_seq
"""
#: The live leases of this host's holders on claimable sessions: whose processes to look at.
SELECT_LOCAL_HOLDERS = f"""
SELECT s.holder_token, s.holder_pid, s.holder_started FROM eventlog_sessions AS s
WHERE {_CLAIMABLE} AND s.holder_token IS NOT NULL AND s.expires_at > %(clock)s
    AND s.holder_host = %(this_host)s
"""
# One claim, one statement: pick (and lock) up to %(limit)s claimable sessions, skipping those
# another claimer has locked, then take their leases (a new epoch each) and notify. The rows
# come back in no order (a window function cannot go with FOR UPDATE): see claim_order.
CLAIM_DUE = f"""
WITH picked AS (
    SELECT s.sid FROM eventlog_sessions AS s
    WHERE {_CLAIMABLE} AND {_FREE}
    ORDER BY {_CLAIM_ORDER}
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE eventlog_sessions AS s SET
        holder_host = %(host)s, holder_pid = %(pid)s, holder_token = %(token)s,
        holder_started = %(started)s, heartbeat = %(clock)s, expires_at = %(expires_at)s,
        epoch = s.epoch + 1
    FROM picked AS p
    WHERE s.sid = p.sid
    RETURNING {_SUMMARY}, s.epoch, {_LOG_SEQ} AS log_seq, {NOTICE_OF_ROW} AS notice
), notified AS (
    SELECT pg_notify(%(channel)s, notice) FROM claimed
)
SELECT c.*, (SELECT count(*) FROM notified) FROM claimed AS c
"""

#: What a listening connection sends now and then to find out that its server is gone.
PROBE = "SELECT 1"

_TOKEN_COLUMNS = "name, scope, digest, created_at, app, expires_at, revoked_at"
#: A new token, in one statement: whether it was added, and whether its name was taken
#: already (the snapshot is the statement's: the new row is not in it). Neither: its digest was.
INSERT_TOKEN = f"""
WITH added AS (
    INSERT INTO eventlog_tokens ({_TOKEN_COLUMNS})
    VALUES (%(name)s, %(scope)s, %(digest)s, %(created_at)s, %(app)s, %(expires_at)s,
        %(revoked_at)s)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM added),
    EXISTS (SELECT 1 FROM eventlog_tokens WHERE name = %(name)s)
"""
SELECT_TOKENS = f"SELECT {_TOKEN_COLUMNS} FROM eventlog_tokens ORDER BY created_at, name"
#: Revoke a token (one revoked already keeps its time); its row, none for an unknown name.
REVOKE_TOKEN = f"""
UPDATE eventlog_tokens SET revoked_at = coalesce(revoked_at, %(now)s) WHERE name = %(name)s
RETURNING {_TOKEN_COLUMNS}
"""
TOKEN_BY_DIGEST = f"SELECT {_TOKEN_COLUMNS} FROM eventlog_tokens WHERE digest = %(digest)s"


def token_params(record: TokenRecord) -> dict[str, Any]:
    """The :data:`INSERT_TOKEN` parameters of a token."""
    return {
        "name": escape(record.name),
        "scope": escape(record.scope),
        "digest": record.digest,
        "created_at": as_utc(record.created_at),
        "app": None if record.app is None else escape(record.app),
        "expires_at": None if record.expires_at is None else as_utc(record.expires_at),
        "revoked_at": None if record.revoked_at is None else as_utc(record.revoked_at),
    }


def token_from_row(row: Sequence[Any]) -> TokenRecord:
    """The token of an eventlog_tokens row (its columns in :data:`SELECT_TOKENS`' order)."""
    name, scope, digest, created_at, app, expires_at, revoked_at = row
    return TokenRecord(
        name=unescape(name),
        scope=unescape(scope),
        digest=digest,
        created_at=as_utc(created_at),
        app=None if app is None else unescape(app),
        expires_at=None if expires_at is None else as_utc(expires_at),
        revoked_at=None if revoked_at is None else as_utc(revoked_at),
    )


def listen(channel: str) -> psql.Composed:
    """The LISTEN statement of a channel (an identifier, quoted)."""
    return psql.SQL("LISTEN {}").format(psql.Identifier(channel))


def channel_of(schema: str) -> str:
    """The notification channel of the tables in ``schema`` (an identifier: 63 bytes at most)."""
    name = f"eventlog_{schema}"
    if len(name.encode()) <= 63 and name.isascii():
        return name
    return "eventlog_" + hashlib.sha256(schema.encode()).hexdigest()[:40]


# -- rows read back ------------------------------------------------------------------------


def event_from_row(row: Sequence[Any], key: SessionKey) -> Event:
    """The event of session ``key`` stored in ``row``; an unreadable row raises
    :class:`~eventlog.CorruptEvent`."""
    seq, event_id, kind, author, at, v, payload = row
    event_id = unescape(event_id)
    decoded = decode_payload(kind, payload, v=v, session=str(key), seq=seq, event_id=event_id)
    return Event(
        key=key,
        kind=EventKind(kind),
        payload=decoded,
        author=unescape(author),
        at=as_utc(at),
        id=event_id,
        seq=seq,
        v=v,
    )


#: How this store's columns read back: U+0000 escaped in text, times as the server gives them.
DECODING = Decoding(text=unescape, time=as_utc)
#: A session summary from a summary row (see :func:`~eventlog._summary_rows.summary_from_row`).
summary_from_row = functools.partial(rows.summary_from_row, decoding=DECODING)
#: A :data:`SELECT_SESSIONS` row as the summary it lists, with its checkpoint.
listed_from_row = functools.partial(rows.listed_from_row, decoding=DECODING)
#: A :data:`SELECT_LEASE` row as (holder, expiry, epoch).
lease_of_row = functools.partial(rows.lease_of_row, decoding=DECODING)
#: Why a lease is no longer ours, from the session's :data:`SELECT_LEASE` row.
lost_detail = functools.partial(rows.lost_detail, decoding=DECODING)


def holder_params(holder: LeaseHolder) -> dict[str, Any]:
    """The holder columns' parameters of a lease holder."""
    return {
        "host": holder.host,
        "pid": holder.pid,
        "token": holder.token,
        "started": holder.started,
    }


def claim_from_row(
    row: Sequence[Any], holder: LeaseHolder, expires_at: datetime
) -> tuple[SessionSummary, int, int]:
    """A :data:`CLAIM_DUE` row as (the claimed summary, the new epoch, the log's newest seq);
    its notice and its count of notifications are not read."""
    *columns, epoch, log_seq, _, _ = row
    summary = summary_from_row([*columns, None, None, None])
    return attrs.evolve(summary, holder=str(holder)), epoch, log_seq
