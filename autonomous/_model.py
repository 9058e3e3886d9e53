"""The Model protocol: what the loop needs from a language model, and the values it returns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from usage import Usage

from ._text import cleaned

#: One chat message in the OpenAI format litellm speaks (role, content, tool_calls, ...).
Message = dict[str, Any]


def _answer_text(text: str) -> str:
    """A model's text made encodable (every answer of every Model passes here, as it is built):
    a lone surrogate kept in the conversation would make every later request fail."""
    return cleaned(text, "model_answer", "text") if isinstance(text, str) else text


def _call_text(text: str) -> str:
    return cleaned(text, "model_answer", "tool_call") if isinstance(text, str) else text


@attrs.frozen
class ToolCall:
    """One tool call the model asked for; ``arguments`` is the raw JSON text the model sent.

    Lone surrogates in any field are replaced by U+FFFD (and logged as ``text_cleaned``).
    """

    id: str = attrs.field(converter=_call_text)
    name: str = attrs.field(converter=_call_text)
    arguments: str = attrs.field(converter=_call_text)


@attrs.frozen
class ModelResponse:
    """One model answer: text, the tool calls it asks for (in order), and the call's usage.

    Lone surrogates in ``text`` and ``model`` are replaced by U+FFFD (and logged as
    ``text_cleaned``), so that no Model can put unencodable text in the conversation.
    """

    text: str = attrs.field(default="", converter=_answer_text)
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = attrs.field(factory=Usage)
    model: str = attrs.field(default="", converter=_answer_text)


@runtime_checkable
class Model(Protocol):
    """A language model the loop can call.

    ``complete`` gets the whole conversation (system message first) and the tool schemas in the
    OpenAI function-calling format, and returns one answer. It must not mutate ``messages``.
    Cancellation (anyio) must abort an in-flight call.

    The protocol stays these two members: any object with them is a model (``Agent`` takes
    what ``isinstance(value, Model)`` accepts), so a member added here would refuse every
    model written to it before. What only litellm's models have, their completion keywords
    (``max_tokens`` bounds the output a budget check reserves), is read off the
    ``LiteLLMModel`` a model string makes, by its type; another model's output limit comes
    from litellm's table by its name, else from the largest output the run has seen.
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
