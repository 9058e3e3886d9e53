"""What a tool call came to: its outcome, and its value or error rendered as the text the model
reads; a failed turn's error rendered the same way for its checkpoint (credentials masked).

Not to be confused with ``_result.py``, the run's outcome (StopReason, RunResult)."""

from __future__ import annotations

import enum
import json
import re
from typing import Any

import attrs

from .._text import cleaned


class ToolOutcome(enum.StrEnum):
    """How a tool call ended; the values are the ``outcome`` strings of ``ToolResult`` events,
    ``ToolCalled`` progress events, logs and telemetry."""

    #: The tool returned (or the run's own tool acknowledged the call).
    OK = "ok"
    #: The tool raised, or its result could not be rendered.
    ERROR = "error"
    #: The tool ran past its timeout.
    TIMEOUT = "timeout"
    #: The permission gate refused the call.
    DENIED = "denied"
    #: The call was refused before anything ran: an unknown tool, arguments that do not fit,
    #: or arguments the run's own tool (done, schedule) does not accept.
    REJECTED = "rejected"
    #: A crash cut the call short and its tool is not idempotent, so it was not run again.
    INTERRUPTED = "interrupted"


class ToolInterrupted(Exception):
    """Raised by a tool whose call was cut short with its effect unknown (an MCP server that
    went away during the call): the call is answered as interrupted, never run again."""


def format_result(value: Any, max_chars: int) -> str:
    """Render a tool's return value as the text the model reads; never raises.

    A str is kept as is; None or an empty result gives ``"(no output)"``; bytes are decoded as
    UTF-8; dicts, lists, tuples, numbers, booleans and attrs instances become compact JSON
    (other objects inside by ``str``); anything else is ``str(value)``. A value whose rendering
    raises (``__str__`` raising, an int too long to print) gives ``"error: the tool's result
    could not be rendered: <Type>: <message>"`` (see :func:`render_result`). Lone surrogates
    are replaced by U+FFFD. Text longer than ``max_chars`` (when positive) is cut to
    ``max_chars`` characters and then gets the marker ``"\\n…[truncated: N more characters]"``,
    so the result is longer than ``max_chars`` by the marker's length.
    """
    return render_result(value, max_chars)[0]


def render_result(value: Any, max_chars: int) -> tuple[str, bool]:
    """The text of :func:`format_result`, and False when it is the could-not-render error
    (the call's outcome is then an error, not ok)."""
    try:
        text, rendered = _render(value), True
    except Exception as exc:  # a broken __str__ must not end the run: the model is told
        text, rendered = f"{_UNRENDERABLE}: {_exception_text(exc)}", False
    return _finish(text, max_chars), rendered


def format_error(exc: BaseException, max_chars: int = 2000) -> str:
    """Render a tool's exception for the model: ``"error: <Type>: <message>"``, no traceback.

    An empty message gives ``"error: <Type>"``; a message that cannot be rendered (its
    ``__str__`` raises) gives ``"error: <Type> (its message could not be rendered)"``; a
    message past ``max_chars`` is truncated as in :func:`format_result`. Never raises.
    """
    return _finish(f"error: {_exception_text(exc)}", max_chars)


#: The most characters of an error a checkpoint keeps (with the note that says it was cut).
ERROR_RECORD_CHARS = 1000

#: What looks like a credential in an error message: an API key (``sk-...``), a bearer token,
#: a ``key=value`` pair whose name says secret, or the password of a URL.
_SECRETS = re.compile(
    r"(?P<key>\bsk-[A-Za-z0-9_-]{4})[A-Za-z0-9_-]+"
    r"|(?P<bearer>\bBearer\s+)\S+"
    r"|(?P<pair>\b[\w-]*(?:api[_-]?key|token|secret|password|passwd|authorization)[\w-]*"
    r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&]+"
    r"|(?P<url>://[^/\s:@]+:)[^@\s/]+(?=@)",
    re.IGNORECASE,
)


def _masked(match: re.Match[str]) -> str:
    prefix = next(group for group in match.groups() if group is not None)
    return f"{prefix}***"


def error_record(exc: BaseException) -> str:
    """The error behind a failed turn as a checkpoint keeps it, for an operator to read:
    ``"<Type>: <message>"``, what looks like a credential masked, at most
    :data:`ERROR_RECORD_CHARS` characters. Never raises."""
    return _finish(_SECRETS.sub(_masked, _exception_text(exc)), ERROR_RECORD_CHARS)


#: The start of the answer for a result whose rendering raised.
_UNRENDERABLE = "error: the tool's result could not be rendered"


def _render(value: Any) -> str:
    """The text of a tool's value, before cleaning and truncation; may raise."""
    kind = type(value)
    if kind is str:
        return value  # type: ignore[no-any-return]
    if kind is int or kind is float:  # the common cheap case, same text as JSON
        return repr(value)
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict | list | tuple | int | float | enum.Enum) or attrs.has(type(value)):
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_to_json)
        except (TypeError, ValueError, RecursionError):
            return str(value)
    return str(value)


def _finish(text: str, max_chars: int) -> str:
    """Clean ``text`` of what UTF-8 cannot encode, name an empty one, and truncate it."""
    text = cleaned(text, "tool_result", "content")
    if not text:
        return "(no output)"
    if 0 < max_chars < len(text):
        return f"{text[:max_chars]}\n…[truncated: {len(text) - max_chars} more characters]"
    return text


def _exception_text(exc: BaseException) -> str:
    """``"<Type>: <message>"`` (or ``"<Type>"``) for an exception, even one whose str() raises."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except Exception:
        return f"{name} (its message could not be rendered)"
    return f"{name}: {message}" if message else name


def _to_json(value: Any) -> Any:
    """``json.dumps`` fallback: attrs instances as dicts, Enums by value, sets as lists, or str."""
    if attrs.has(type(value)):
        return attrs.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return list(value)
    return str(value)
