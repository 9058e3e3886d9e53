"""Append-only event log: events; in-memory, SQLite and PostgreSQL stores; checkpoints; leases.

Map:
    _events.py   the event envelope, one frozen payload class per kind, session keys and
                 their limit (MAX_KEY_LENGTH)
    _codec.py    JSON through one private cattrs converter, schema version checks
    _store.py    the EventLog protocol (with its own append_and_release and watch), SessionRef,
                 leases, claims, session summaries, prune results
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

from typing import TYPE_CHECKING, Any

from ._codec import decode_payload, encode_payload, event_from_dict, event_to_dict
from ._errors import (
    CorruptEvent,
    EventLogError,
    InvalidSessionKey,
    LeaseLost,
    SessionFinished,
    SessionLocked,
    StoreUnavailable,
    UnknownSchemaVersion,
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
    Clock,
    EventLog,
    Lease,
    LeaseHolder,
    PrunedSession,
    PruneResult,
    SessionRef,
    SessionSummary,
    StoreWatch,
)

if TYPE_CHECKING:
    from ._postgres._listen import Watch
    from ._postgres._log import PostgresEventLog

#: The names imported on first use: they need the [postgres] extra (psycopg), which
#: ``import eventlog`` does not.
_POSTGRES_NAMES = {"PostgresEventLog": "_postgres._log", "Watch": "_postgres._listen"}


def __getattr__(name: str) -> Any:
    """PostgresEventLog and Watch, imported when first used; a clear ImportError without psycopg."""
    module = _POSTGRES_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'eventlog' has no attribute {name!r}")
    import importlib

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
    "Clock",
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
    "ToolCallRecord",
    "ToolResult",
    "UnknownSchemaVersion",
    "UserMessage",
    "Watch",
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
