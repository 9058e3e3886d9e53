"""How PostgresEventLog stores text: U+0000 escaped, session keys as parameters, notification
payloads."""

from __future__ import annotations

import hashlib
import re

from ._events import SessionKey

# -- the NUL character ---------------------------------------------------------------------
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
