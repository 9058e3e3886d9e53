"""Message and tool content in the shape of the OpenTelemetry GenAI conventions (opt-in only).

:class:`~autonomous._observe._telemetry.Telemetry` calls these only when content capture is on; each
returns the JSON text of one attribute:

    system_instructions   ``gen_ai.system_instructions``: the system message's text parts
    input_messages        ``gen_ai.input.messages``: the rest of the conversation sent
    output_messages       ``gen_ai.output.messages``: the model's answer

A message is ``{"role", "parts": [...]}``; a part is ``{"type": "text", "content"}``,
``{"type": "tool_call", "id", "name", "arguments"}`` or ``{"type": "tool_call_response",
"id", "response"}``; an answer also has its ``finish_reason`` (``tool_call`` or ``stop``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._model import Message, ModelResponse

__all__ = ["input_messages", "output_messages", "system_instructions"]


def system_instructions(messages: Sequence[Message]) -> str | None:
    """The system message's text as ``gen_ai.system_instructions``; ``None`` without one."""
    texts = [_text(m.get("content")) for m in messages if m.get("role") == "system"]
    if not texts:
        return None
    return _json([{"type": "text", "content": text} for text in texts])


def input_messages(messages: Sequence[Message]) -> str:
    """The conversation sent to the model (the system message aside) as
    ``gen_ai.input.messages``."""
    return _json([_message(m) for m in messages if m.get("role") != "system"])


def output_messages(response: ModelResponse) -> str:
    """The model's answer as ``gen_ai.output.messages``."""
    parts: list[dict[str, Any]] = [{"type": "text", "content": response.text}]
    if not response.text:
        parts = []
    parts += [_call_part(c.id, c.name, c.arguments) for c in response.tool_calls]
    finish = "tool_call" if response.tool_calls else "stop"
    return _json([{"role": "assistant", "parts": parts, "finish_reason": finish}])


def _message(message: Message) -> dict[str, Any]:
    """One chat-completions message in the conventions' shape."""
    role = str(message.get("role", ""))
    if role == "tool":
        part = {
            "type": "tool_call_response",
            "id": message.get("tool_call_id"),
            "response": _text(message.get("content")),
        }
        return {"role": "tool", "parts": [part]}
    parts: list[dict[str, Any]] = []
    text = _text(message.get("content"))
    if text:
        parts.append({"type": "text", "content": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(_call_part(call.get("id"), function.get("name"), function.get("arguments")))
    return {"role": role, "parts": parts}


def _call_part(call_id: object, name: object, arguments: object) -> dict[str, Any]:
    """A ``tool_call`` part; JSON arguments are given parsed, anything else as sent."""
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError, RecursionError):
            arguments = json.loads(arguments)
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def _text(content: object) -> str:
    """A message's content as text (a list of content parts keeps its text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return str(content)


def _json(value: object) -> str:
    """Compact JSON text; anything JSON cannot take becomes its ``str``."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
