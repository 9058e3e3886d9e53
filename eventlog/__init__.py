"""Append-only event log: events, SQLite and in-memory stores, checkpoints, session leases.

Map:
    _events.py   the event envelope and one frozen payload class per kind
    _codec.py    JSON through one private cattrs converter, schema version checks
    _store.py    the EventLog protocol, SessionRef, leases, claims, session summaries, prune results
    _memory.py   MemoryEventLog: in-process, not durable
    _sqlite.py   SqliteEventLog: aiosqlite, WAL, one transaction per write, lease rows
    _sqlite_tx.py  what runs inside those transactions: inserts, the lease fence, claims,
                 batched renewals, migration
    _sqlite_prune.py  SqliteEventLog.prune: finished sessions, deleted in short batches
    _sqlite_errors.py  SqliteEventLog's error messages (a file it cannot use, sqlite errors)
    _schema.py   SqliteEventLog's tables, statements and row conversions
    _worker.py   aiosqlite's thread: one trip per operation, a daemon closed at exit
    _rules.py    pure rules the stores share: lease takeover, summaries, due, interrupted and
                 finished sessions
    _process.py  this host's process table: a holder's start time, zombies, reused pids
    _errors.py   the error tree (EventLogError at the root)
"""

from ._codec import decode_payload, encode_payload, event_from_dict, event_to_dict
from ._errors import (
    CorruptEvent,
    EventLogError,
    LeaseLost,
    SessionFinished,
    SessionLocked,
    StoreUnavailable,
    UnknownSchemaVersion,
)
from ._events import (
    SCHEMA_VERSION,
    AssistantMessage,
    Checkpoint,
    Control,
    Event,
    EventKind,
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
from ._sqlite import SqliteEventLog
from ._store import (
    Claim,
    Clock,
    EventLog,
    Lease,
    LeaseHolder,
    PrunedSession,
    PruneResult,
    SessionRef,
    SessionSummary,
)

__all__ = [
    "SCHEMA_VERSION",
    "AssistantMessage",
    "Checkpoint",
    "Claim",
    "Clock",
    "Control",
    "CorruptEvent",
    "Event",
    "EventKind",
    "EventLog",
    "EventLogError",
    "InboxDelivered",
    "InboxQueued",
    "Lease",
    "LeaseHolder",
    "LeaseLost",
    "MemoryEventLog",
    "Note",
    "Originator",
    "Payload",
    "PermissionDecision",
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
    "ToolCallRecord",
    "ToolResult",
    "UnknownSchemaVersion",
    "UserMessage",
    "decode_payload",
    "encode_payload",
    "event_from_dict",
    "event_to_dict",
    "new_event_id",
    "process_alive",
    "utcnow",
]

#: Says this package is bounded-autonomous's: ``import autonomous`` refuses a package of the
#: same name from another distribution (PyPI has one) installed in its place.
__bounded_autonomous__ = True
