"""Append-only event log: events; in-memory, SQLite and PostgreSQL stores; checkpoints; leases.

The log also keeps the HTTP API's tokens (their secrets' digests, never the secrets).

Map:
    _events.py   the event envelope, one frozen payload class per kind, session keys and
                 their limit (MAX_KEY_LENGTH)
    codec.py     public: events and payloads to JSON and back (one private cattrs converter),
                 schema version checks
    _store.py    the EventLog protocol (with its own append_and_release and watch), SessionRef,
                 leases, claims, session summaries, prune results, API tokens (TokenRecord:
                 a secret's digest, never the secret)
    _memory.py   MemoryEventLog: in-process, not durable
    _sqlite/     SqliteEventLog (aiosqlite, WAL, one transaction per write, lease rows) with its
                 transactions, schema, prune and worker thread (its map opens _sqlite/)
    _postgres/   PostgresEventLog (psycopg 3 async, a pool, one statement per write, claims)
                 with its SQL, batches, connections, prune and LISTEN (its map opens _postgres/)
    _prune.py    the prune both durable logs run: finished (on request, interrupted) sessions,
                 emptied in short batches
    _summary_rows.py  session summary and lease rows read back, for both durable logs (a
                 listed session with its checkpoint decoded)
    _rules.py    pure rules the stores share: lease takeover, summaries, due, interrupted,
                 cut-off and finished sessions, keys checked
    _process.py  this host's process table: a holder's start time, zombies, reused pids
    _errors.py   the error tree (EventLogError at the root)
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    CorruptEvent,
    EventLogError,
    InvalidSessionKey,
    LeaseLost,
    SessionFinished,
    SessionLocked,
    StoreUnavailable,
    TokenExists,
    UnknownSchemaVersion,
    UnknownToken,
)
from ._events import (
    MAX_KEY_LENGTH,
    SCHEMA_VERSION,
    AssistantMessage,
    Budgets,
    Checkpoint,
    Control,
    Event,
    EventKind,
    HistorySummary,
    InboxDelivered,
    InboxQueued,
    Note,
    Originator,
    Payload,
    PermissionDecision,
    Schedule,
    SessionKey,
    ToolCallRecord,
    ToolResult,
    UserMessage,
    new_event_id,
    utcnow,
)
from ._memory import MemoryEventLog
from ._rules import process_alive
from ._sqlite._log import SqliteEventLog
from ._store import (
    Claim,
    EventLog,
    Lease,
    LeaseHolder,
    Now,
    PrunedSession,
    PruneResult,
    SessionRef,
    SessionSummary,
    StoreWatch,
    TokenRecord,
)

if TYPE_CHECKING:
    from ._postgres._listen import Watch
    from ._postgres._log import PostgresEventLog

#: The names imported on first use: they need the [postgres] extra (psycopg), which
#: ``import eventlog`` does not.
_POSTGRES_NAMES = {"PostgresEventLog": "_postgres._log", "Watch": "_postgres._listen"}

#: Names that moved from here to a public module of their own, by the module they are in now:
#: still found here (see :func:`__getattr__`) for programs written before, though not exported.
_MOVED = {
    "decode_payload": "eventlog.codec",
    "encode_payload": "eventlog.codec",
    "event_from_dict": "eventlog.codec",
    "event_to_dict": "eventlog.codec",
}
#: Names given up for clearer ones, by the name they have now (``Clock`` was one word for two
#: things: here a function giving the time, in ``scheduler`` an object that also sleeps).
_RENAMED = {"Clock": "Now"}


def __getattr__(name: str) -> Any:
    """PostgresEventLog and Watch, imported when first used (a clear ImportError without
    psycopg); a name in :data:`_MOVED` from its new module, or in :data:`_RENAMED` by its
    new name, silently and not kept here (it stays out of ``__all__`` and ``dir()``)."""
    if name in _RENAMED:
        return globals()[_RENAMED[name]]
    moved = _MOVED.get(name)
    if moved is not None:
        return getattr(importlib.import_module(moved), name)
    module = _POSTGRES_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'eventlog' has no attribute {name!r}")
    try:
        found = getattr(importlib.import_module(f".{module}", __name__), name)
    except ImportError as exc:
        raise ImportError(
            f"eventlog.{name} needs psycopg 3 and psycopg-pool ({exc}):"
            " pip install 'bounded-autonomous[postgres]'"
        ) from exc
    globals()[name] = found
    return found


__all__ = [
    "MAX_KEY_LENGTH",
    "SCHEMA_VERSION",
    "AssistantMessage",
    "Budgets",
    "Checkpoint",
    "Claim",
    "Control",
    "CorruptEvent",
    "Event",
    "EventKind",
    "EventLog",
    "EventLogError",
    "HistorySummary",
    "InboxDelivered",
    "InboxQueued",
    "InvalidSessionKey",
    "Lease",
    "LeaseHolder",
    "LeaseLost",
    "MemoryEventLog",
    "Note",
    "Now",
    "Originator",
    "Payload",
    "PermissionDecision",
    "PostgresEventLog",
    "PruneResult",
    "PrunedSession",
    "Schedule",
    "SessionFinished",
    "SessionKey",
    "SessionLocked",
    "SessionRef",
    "SessionSummary",
    "SqliteEventLog",
    "StoreUnavailable",
    "StoreWatch",
    "TokenExists",
    "TokenRecord",
    "ToolCallRecord",
    "ToolResult",
    "UnknownSchemaVersion",
    "UnknownToken",
    "UserMessage",
    "Watch",
    "new_event_id",
    "process_alive",
    "utcnow",
]

#: Says this package is bounded-autonomous's: ``import autonomous`` refuses a package of the
#: same name from another distribution (PyPI has one) installed in its place.
__bounded_autonomous__ = True
