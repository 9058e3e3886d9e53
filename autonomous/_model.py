"""The Model protocol: what the loop needs from a language model, and the values it returns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from usage import Usage

#: One chat message in the OpenAI format litellm speaks (role, content, tool_calls, ...).
Message = dict[str, Any]


@attrs.frozen
class ToolCall:
    """One tool call the model asked for; ``arguments`` is the raw JSON text the model sent."""

    id: str
    name: str
    arguments: str


@attrs.frozen
class ModelResponse:
    """One model answer: text, the tool calls it asks for (in order), and the call's usage."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = attrs.field(factory=Usage)
    model: str = ""


@runtime_checkable
class Model(Protocol):
    """A language model the loop can call.

    ``complete`` gets the whole conversation (system message first) and the tool schemas in the
    OpenAI function-calling format, and returns one answer. It must not mutate ``messages``.
    Cancellation (anyio) must abort an in-flight call.
    """

    @property
    def name(self) -> str:
        """The model's name, used for pricing and the usage tracker."""
        ...

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> ModelResponse:
        """One model call."""
        ...
