"""The eventlog error tree.

EventLogError
├── SessionLocked          another live holder has the session lease
├── LeaseLost              our lease was taken over or expired while we ran
├── SessionFinished        the session has finished: control and inject are refused
├── CorruptEvent           a stored row that cannot be read back (also a ValueError)
│   └── UnknownSchemaVersion   written by a newer (or unknown) schema
├── InvalidSessionKey      a key no store takes: a part too long, or not text (also a ValueError)
├── TokenExists            a token of that name (or secret) is in the log already (ValueError)
├── UnknownToken           no token of that name in the log (also a LookupError)
└── StoreUnavailable       the database cannot be opened or written (missing, read-only, full)
"""

from __future__ import annotations


class EventLogError(Exception):
    """Root of every error the eventlog package raises."""


class SessionLocked(EventLogError):
    """Another live holder has the session's lease; ``holder`` names it."""

    def __init__(self, session: str, holder: str) -> None:
        super().__init__(f"session {session} is held by {holder}")
        self.session = session
        self.holder = holder


class LeaseLost(EventLogError):
    """Our lease on a session expired or was taken over by another holder."""

    def __init__(self, session: str, detail: str = "") -> None:
        super().__init__(f"lease on session {session} lost" + (f": {detail}" if detail else ""))
        self.session = session


class SessionFinished(EventLogError):
    """The session has finished (completed, or stopped for good): control and inject are refused.

    A message or a control request for it would be a row nobody ever reads.
    """

    def __init__(self, session: str, detail: str = "") -> None:
        super().__init__(
            f"session {session} has finished: control and inject are refused"
            + (f" ({detail})" if detail else "")
        )
        self.session = session


class CorruptEvent(EventLogError, ValueError):
    """A stored event cannot be decoded; names the session and the event's seq and id."""

    def __init__(self, session: str, seq: int, event_id: str, detail: str) -> None:
        super().__init__(f"event seq={seq} id={event_id} of session {session}: {detail}")
        self.session = session
        self.seq = seq
        self.event_id = event_id


class UnknownSchemaVersion(CorruptEvent):
    """A stored event was written with a schema version this code does not know."""


class InvalidSessionKey(EventLogError, ValueError):
    """A session key no store takes, refused before anything is written: ``part`` (``app``,
    ``user`` or ``session_id``) is longer than :data:`~eventlog.MAX_KEY_LENGTH` characters, or
    is not text that can be stored (not a ``str``, or a lone surrogate)."""

    def __init__(self, part: str, detail: str) -> None:
        super().__init__(f"session key part {part} {detail}")
        self.part = part


class TokenExists(EventLogError, ValueError):
    """A token of this ``name`` is in the log already (revoked or not: a name is never reused,
    so that the events a token's holder authored name one holder), or, as ``detail`` says,
    another token has the same secret."""

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(
            f"token {name!r}: {detail}"
            if detail
            else f"a token named {name!r} exists already (names are never reused)"
        )
        self.name = name


class UnknownToken(EventLogError, LookupError):
    """No token of this ``name`` is in the log."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no token named {name!r} in the log")
        self.name = name


class StoreUnavailable(EventLogError):
    """The store cannot be opened or written: missing, read-only, or out of space.

    ``transient`` says the store may well answer the same call later without anyone's help:
    a connection lost, a server restarting or failing over, no answer within the timeout, a
    file locked by another writer. A missing or read-only store, or a statement the server
    refuses, is not transient.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
