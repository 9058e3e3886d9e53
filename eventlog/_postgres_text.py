"""How PostgresEventLog stores text: U+0000 escaped, session keys as parameters, notification
payloads."""

from __future__ import annotations

import json
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


def notice(key: SessionKey) -> str:
    """A session's notification payload: its key columns as a JSON array (pg_notify payloads
    are what a listener reads back through :func:`key_of_notice`)."""
    return json.dumps([escape(key.app), escape(key.user), escape(key.session_id)])


def key_of_notice(payload: str) -> SessionKey | None:
    """The session a notification names (``None``: a payload this code did not write)."""
    try:
        app, user, session_id = json.loads(payload)
        return key_of(str(app), str(user), str(session_id))
    except (ValueError, TypeError):
        return None
