"""What OpenAI's chat-completions endpoint rejects with HTTP 400, as one pure function.

:func:`check_chat_request` looks at a request body the way the provider does before it runs
the model, and returns the first :class:`Rejection` (message in OpenAI's words) or ``None``.
``ScriptedServer`` answers a rejected request with a 400 and ``ScriptedModel`` raises
:class:`ConversationRejected`, so every test that talks to either checks that what the runtime
sends is a conversation a real provider accepts.

The rules are OpenAI's, no stricter: a system message in the middle, an assistant message first,
two user messages in a row or a conversation ending with an assistant message are all accepted.
Rejected: a malformed body or message, an assistant's tool call not answered by exactly one
``tool`` message with its id before the next other message, a ``tool`` message that answers no
pending call, a malformed tool definition, and text that cannot be sent as UTF-8 (a lone
surrogate: OpenAI refuses the body as invalid JSON).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["INVALID_JSON", "ConversationRejected", "Rejection", "check_chat_request"]

_ROLES = ("system", "assistant", "user", "function", "tool", "developer")
#: The content part types OpenAI accepts per role (a list content is checked against these).
_PART_TYPES: Mapping[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "developer": frozenset({"text"}),
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
    "tool": frozenset({"text"}),
    "function": frozenset({"text"}),
}
_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_MAX_NAME = 64
_SURROGATE = re.compile("[\ud800-\udfff]")
#: OpenAI's answer to a body it cannot parse (a lone surrogate is not valid UTF-8).
INVALID_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON.)"
)
_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
_ORPHAN = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)


@attrs.frozen
class Rejection:
    """Why the provider refuses a request: its message, the parameter it names, its code."""

    message: str
    param: str | None = "messages"
    code: str | None = None

    def error_body(self) -> dict[str, Any]:
        """The JSON body OpenAI sends with the HTTP 400."""
        return {
            "error": {
                "message": self.message,
                "type": "invalid_request_error",
                "param": self.param,
                "code": self.code,
            }
        }


class ConversationRejected(ValueError):
    """An in-process model refused the request as OpenAI would (its HTTP 400).

    Raised by ``ScriptedModel``; the loop reports it as a ``ModelError`` with this as the
    ``__cause__``, as it does for litellm's ``BadRequestError`` from the HTTP path.
    """

    #: The HTTP status the provider answers with, as on litellm's errors.
    status_code = 400

    def __init__(self, rejection: Rejection) -> None:
        super().__init__(f"HTTP 400 invalid_request_error: {rejection.message}")
        #: What was refused and why.
        self.rejection = rejection


def check_chat_request(body: Mapping[str, Any]) -> Rejection | None:
    """The first reason OpenAI would refuse this chat-completions body, or ``None``."""
    if _has_surrogate(body):
        return Rejection(INVALID_JSON, None)
    if not isinstance(body.get("model"), str) or not body["model"]:
        return Rejection("you must provide a model parameter", None)
    if "messages" not in body:
        return Rejection(
            "Missing required parameter: 'messages'.", "messages", "missing_required_parameter"
        )
    messages = body["messages"]
    if not isinstance(messages, list):
        return _wrong_type("messages", "an array", messages)
    if not messages:
        return _empty("messages")
    for index, message in enumerate(messages):
        found = _check_message(index, message)
        if found is not None:
            return found
    found = _check_pairing(messages)
    if found is None and body.get("tools") is not None:
        found = _check_tools(body["tools"])
    return found


# --------------------------------------------------------------------------- messages


def _check_message(index: int, message: Any) -> Rejection | None:
    """The shape of one message: an object with a known role and content of a known form."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        return _wrong_type(where, "an object", message)
    if "role" not in message:
        return _missing(f"{where}.role")
    role = message["role"]
    if role not in _ROLES:
        supported = ", ".join(f"'{r}'" for r in _ROLES[:-1]) + f", and '{_ROLES[-1]}'"
        return Rejection(
            f"Invalid value: {_show(role)}. Supported values are: {supported}.",
            f"{where}.role",
            "invalid_value",
        )
    found = _check_content(where, role, message)
    if found is None and role == "tool" and not isinstance(message.get("tool_call_id"), str):
        found = _missing(f"{where}.tool_call_id")
    if found is None and role == "assistant" and message.get("tool_calls") is not None:
        found = _check_tool_calls(where, message["tool_calls"])
    return found


def _check_content(where: str, role: str, message: Mapping[str, Any]) -> Rejection | None:
    """Content is a string or a list of parts; only an assistant calling tools may omit it."""
    content = message.get("content")
    if content is None:
        if role == "function" or message.get("tool_calls") or message.get("function_call"):
            return None
        if "content" not in message:
            return _missing(f"{where}.content")
        return Rejection(
            "Invalid value for 'content': expected a string, got null.", f"{where}.content"
        )
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return _wrong_type(f"{where}.content", "one of a string or array of objects", content)
    for number, part in enumerate(content):
        at = f"{where}.content[{number}]"
        if not isinstance(part, dict):
            return _wrong_type(at, "an object", part)
        kind = part.get("type")
        if kind not in _PART_TYPES[role]:
            allowed = ", ".join(f"'{t}'" for t in sorted(_PART_TYPES[role]))
            return Rejection(
                f"Invalid value: {_show(kind)}. Supported values are: {allowed}.",
                f"{at}.type",
                "invalid_value",
            )
        if kind == "text" and not isinstance(part.get("text"), str):
            return _missing(f"{at}.text")
    return None


def _check_tool_calls(where: str, tool_calls: Any) -> Rejection | None:
    """An assistant's ``tool_calls``: a non-empty array of function calls with ids."""
    if not isinstance(tool_calls, list):
        return _wrong_type(f"{where}.tool_calls", "an array", tool_calls)
    if not tool_calls:
        return _empty(f"{where}.tool_calls")
    for number, tool_call in enumerate(tool_calls):
        at = f"{where}.tool_calls[{number}]"
        if not isinstance(tool_call, dict):
            return _wrong_type(at, "an object", tool_call)
        if not isinstance(tool_call.get("id"), str):
            return _missing(f"{at}.id")
        if tool_call.get("type") != "function":
            return Rejection(
                f"Invalid value: {_show(tool_call.get('type'))}. Supported values are: 'function'.",
                f"{at}.type",
                "invalid_value",
            )
        function = tool_call.get("function")
        if not isinstance(function, dict):
            return _missing(f"{at}.function")
        for key in ("name", "arguments"):
            if not isinstance(function.get(key), str):
                return _missing(f"{at}.function.{key}")
    return None


def _check_pairing(messages: Sequence[Mapping[str, Any]]) -> Rejection | None:
    """Every tool call answered once, by id, by the ``tool`` messages right after its message."""
    asked_at = -1  # index of the assistant message whose calls are being answered, or -1
    asked: list[str] = []
    unanswered: list[str] = []
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            call_id = message["tool_call_id"]
            if asked_at < 0 or (call_id in asked and call_id not in unanswered):
                return Rejection(_ORPHAN, f"messages.[{index}].role")
            if call_id not in unanswered:
                return Rejection(
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                    "'tool_calls' of previous message.",
                    f"messages.[{index}].tool_call_id",
                )
            unanswered.remove(call_id)
            continue
        if unanswered:
            return _unanswered(asked_at, unanswered)
        asked_at, asked = -1, []
        if message["role"] == "assistant" and message.get("tool_calls"):
            asked_at = index
            asked = [c["id"] for c in message["tool_calls"]]
            unanswered = list(asked)
    return _unanswered(asked_at, unanswered) if unanswered else None


def _unanswered(asked_at: int, ids: Sequence[str]) -> Rejection:
    return Rejection(_UNANSWERED.format(ids=", ".join(ids)), f"messages.[{asked_at}].role")


# --------------------------------------------------------------------------- tools


def _check_tools(tools: Any) -> Rejection | None:
    """Tool definitions: function tools with valid names and object parameter schemas."""
    if not isinstance(tools, list):
        return _wrong_type("tools", "an array", tools)
    if not tools:
        return _empty("tools")
    for number, tool in enumerate(tools):
        at = f"tools[{number}]"
        if not isinstance(tool, dict):
            return _wrong_type(at, "an object", tool)
        if tool.get("type") != "function":
            return Rejection(
                f"Invalid value: {_show(tool.get('type'))}. Supported values are: 'function'.",
                f"{at}.type",
                "invalid_value",
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            return _missing(f"{at}.function")
        found = _check_name(f"{at}.function.name", function.get("name"))
        if found is None and function.get("parameters") is not None:
            found = _check_parameters(at, function["name"], function["parameters"])
        if found is not None:
            return found
    return None


def _check_name(at: str, name: Any) -> Rejection | None:
    if not isinstance(name, str):
        return _missing(at)
    if len(name) > _MAX_NAME:
        return Rejection(
            f"Invalid '{at}': string too long. Expected a string with maximum length "
            f"{_MAX_NAME}, but got a string with length {len(name)} instead.",
            at,
            "string_above_max_length",
        )
    if not _NAME.fullmatch(name):
        return Rejection(
            f"Invalid '{at}': string does not match pattern. Expected a string that matches "
            "the pattern '^[a-zA-Z0-9_-]+$'.",
            at,
            "invalid_value",
        )
    return None


def _check_parameters(at: str, name: str, parameters: Any) -> Rejection | None:
    """The parameter schema is an object; OpenAI also refuses an array schema without items."""
    if not isinstance(parameters, dict):
        return _wrong_type(f"{at}.function.parameters", "an object", parameters)
    path = _array_without_items(parameters, ())
    if path is None:
        return None
    return Rejection(
        f"Invalid schema for function '{name}': In context={path!r}, array schema missing items.",
        f"{at}.function.parameters",
        "invalid_function_parameters",
    )


def _array_without_items(schema: Any, path: tuple[str, ...]) -> tuple[str, ...] | None:
    """Where in ``schema`` an ``array`` has no ``items`` (the context OpenAI names), if anywhere."""
    if isinstance(schema, list):
        for item in schema:
            found = _array_without_items(item, path)
            if found is not None:
                return found
        return None
    if not isinstance(schema, dict):
        return None
    kinds = schema.get("type")
    is_array = kinds == "array" or (isinstance(kinds, list) and "array" in kinds)
    # A tuple schema (prefixItems) is left alone: only a bare array is known to be refused.
    if is_array and "items" not in schema and "prefixItems" not in schema:
        return path
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            for prop, sub in value.items():
                found = _array_without_items(sub, (*path, key, prop))
                if found is not None:
                    return found
        elif key in ("items", "anyOf", "oneOf", "allOf", "additionalProperties", "prefixItems"):
            found = _array_without_items(value, (*path, key))
            if found is not None:
                return found
    return None


# --------------------------------------------------------------------------- wording


def _has_surrogate(value: Any) -> bool:
    """Whether any string (key or value) holds a surrogate code point, which UTF-8 cannot hold."""
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, Mapping):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_surrogate(v) for v in value)
    return False


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return "an object"


def _show(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else _json_type(value)


def _wrong_type(at: str, expected: str, value: Any) -> Rejection:
    return Rejection(
        f"Invalid type for '{at}': expected {expected}, but got {_json_type(value)} instead.",
        at,
        "invalid_type",
    )


def _missing(at: str) -> Rejection:
    return Rejection(f"Missing required parameter: '{at}'.", at, "missing_required_parameter")


def _empty(at: str) -> Rejection:
    return Rejection(
        f"Invalid '{at}': empty array. Expected an array with minimum length 1, but got an "
        "empty array instead.",
        at,
        "empty_array",
    )
