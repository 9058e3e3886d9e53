"""The steps a ScriptedServer plays (reply, call, calls, error, hang, delay) and their bodies."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

__all__ = [
    "AnswerStep",
    "DelayStep",
    "ErrorStep",
    "HangStep",
    "ScriptedToolCall",
    "Step",
    "call",
    "calls",
    "delay",
    "error",
    "hang",
    "reply",
]


# --------------------------------------------------------------------------- steps


@attrs.frozen
class ScriptedToolCall:
    """One tool call in a scripted answer; ``id=None`` lets the server number it per request."""

    name: str
    arguments: str
    id: str | None = None


@attrs.frozen
class AnswerStep:
    """A successful answer: text, tool calls, and the usage the server reports for it."""

    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    input_tokens: int = 10
    output_tokens: int = 5
    cached_tokens: int = 0


@attrs.frozen
class ErrorStep:
    """An HTTP error answer with an OpenAI-style ``{"error": {...}}`` body; ``retry_after``,
    when set, is sent as the ``Retry-After`` header (seconds or an HTTP-date)."""

    status: int = 500
    message: str = "scripted error"
    retry_after: str | None = None


@attrs.frozen
class HangStep:
    """Never answer: hold the request until the client disconnects or the server closes."""


@attrs.frozen
class DelayStep:
    """Wait ``seconds`` (cut short if the client leaves or the server closes), then ``step``."""

    seconds: float
    step: Step


#: Anything the server can play for one request.
Step = AnswerStep | ErrorStep | HangStep | DelayStep


def reply(
    text: str, *, input_tokens: int = 10, output_tokens: int = 5, cached_tokens: int = 0
) -> AnswerStep:
    """A plain text answer with the given usage."""
    return AnswerStep(text, (), input_tokens, output_tokens, cached_tokens)


def call(
    name: str,
    arguments: Mapping[str, Any] | str,
    *,
    id: str | None = None,
    text: str = "",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cached_tokens: int = 0,
) -> AnswerStep:
    """An answer asking for one tool call; a mapping of arguments is sent as JSON text."""
    tool_call = ScriptedToolCall(name, _arguments_text(arguments), id)
    return AnswerStep(text, (tool_call,), input_tokens, output_tokens, cached_tokens)


def calls(
    items: Sequence[AnswerStep | tuple[str, Mapping[str, Any] | str]],
    *,
    text: str = "",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cached_tokens: int = 0,
) -> AnswerStep:
    """An answer asking for several tool calls, in order.

    Each item is a ``(name, arguments)`` pair or a :func:`call` step, whose tool calls are taken
    (its text and usage are not).
    """
    tool_calls: list[ScriptedToolCall] = []
    for item in items:
        if isinstance(item, AnswerStep):
            tool_calls.extend(item.tool_calls)
        else:
            name, arguments = item
            tool_calls.append(ScriptedToolCall(name, _arguments_text(arguments)))
    return AnswerStep(text, tuple(tool_calls), input_tokens, output_tokens, cached_tokens)


def error(
    status: int = 500, message: str = "scripted error", *, retry_after: float | str | None = None
) -> ErrorStep:
    """An HTTP error answer (500 unless told otherwise), e.g. ``error(429, retry_after=2)``."""
    after = None if retry_after is None else str(retry_after)
    return ErrorStep(status, message, after)


def hang() -> HangStep:
    """A request that is never answered (for cancellation and timeout tests)."""
    return HangStep()


def delay(seconds: float, step: Step) -> DelayStep:
    """Play ``step`` after ``seconds``."""
    return DelayStep(seconds, step)


def _arguments_text(arguments: Mapping[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(dict(arguments))


# --------------------------------------------------------------------------- rendering


def _usage(step: AnswerStep) -> dict[str, Any]:
    return {
        "prompt_tokens": step.input_tokens,
        "completion_tokens": step.output_tokens,
        "total_tokens": step.input_tokens + step.output_tokens,
        "prompt_tokens_details": {"cached_tokens": step.cached_tokens},
    }


def _tool_calls(step: AnswerStep, request_no: int) -> list[dict[str, Any]]:
    return [
        {
            "id": tc.id if tc.id is not None else f"call_{request_no}_{i}",
            "type": "function",
            "function": {"name": tc.name, "arguments": tc.arguments},
        }
        for i, tc in enumerate(step.tool_calls)
    ]


def _finish_reason(step: AnswerStep) -> str:
    return "tool_calls" if step.tool_calls else "stop"


def _completion(step: AnswerStep, model: str, request_no: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step.text}
    if step.tool_calls:
        message["content"] = step.text or None
        message["tool_calls"] = _tool_calls(step, request_no)
    return {
        "id": f"chatcmpl-scripted-{request_no}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(step),
            }
        ],
        "usage": _usage(step),
    }


def _chunks(
    step: AnswerStep, model: str, request_no: int, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """The OpenAI stream for ``step``: role, text pieces, tool-call deltas, finish, usage."""
    base: dict[str, Any] = {
        "id": f"chatcmpl-scripted-{request_no}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**base, "choices": [choice]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in re.findall(r"\s*\S+\s*|\s+", step.text):
        yield chunk({"content": piece})
    for index, tc in enumerate(_tool_calls(step, request_no)):
        function, arguments = tc["function"], tc["function"]["arguments"]
        head = {"index": index, "id": tc["id"], "type": "function"}
        yield chunk(
            {"tool_calls": [{**head, "function": {"name": function["name"], "arguments": ""}}]}
        )
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            if part:
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, _finish_reason(step))
    if include_usage:
        yield {**base, "choices": [], "usage": _usage(step)}
