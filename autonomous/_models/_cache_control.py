"""Anthropic prompt-cache breakpoints, added to the messages of the request sent and nowhere else.

Anthropic caches a prompt's prefix only up to the blocks marked ``cache_control`` (at most four
a request; a later request reads the longest marked prefix it shares, looking back up to 20
blocks from each of its own marks). Two marks serve a long-running agent:

- **the system prompt**, which holds steering and skills and never changes within a run;
- **the last stable message**: the one just before the newest turn's user message, i.e. the
  end of the previous turn. Everything up to it is sent again, byte for byte, by every call of
  this turn and of the next, so the next turn's mark finds this one within its look-back.

The marks take the form litellm translates for Anthropic (and Bedrock / Vertex AI Claude): text
content becomes a list of one text block carrying ``cache_control``; a tool result carries it
on the message (litellm moves it onto the ``tool_result`` block); an assistant message with tool
calls carries it on its last tool call (litellm moves it onto that ``tool_use``, the message's
last block).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._model import Message

__all__ = ["EPHEMERAL", "uses_cache_breakpoints", "with_cache_breakpoints"]

#: The only cache kind Anthropic has: five minutes, refreshed by every read.
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}

#: Providers that serve Claude models under another name and honour litellm's cache_control.
_CLAUDE_HOSTS = frozenset({"bedrock", "bedrock_converse", "vertex_ai", "vertex_ai_beta"})


def uses_cache_breakpoints(model: str, provider: str) -> bool:
    """Whether requests to ``model`` (served by litellm's ``provider``) get cache breakpoints:
    Anthropic's own models, and Claude models on Bedrock or Vertex AI."""
    if provider == "anthropic":
        return True
    name = model.lower()
    return provider in _CLAUDE_HOSTS and ("claude" in name or "anthropic" in name)


def with_cache_breakpoints(messages: Sequence[Message]) -> list[Message]:
    """A copy of ``messages`` with breakpoints on the system prompt and the last stable message.

    The messages given are never changed: only the marked ones are copied (shallowly, with
    new content). A message with nothing to cache (empty content, no tool calls) is left as is.
    """
    marked = list(messages)
    for index in _breakpoints(marked):
        marked[index] = _mark(marked[index])
    return marked


def _breakpoints(messages: Sequence[Message]) -> list[int]:
    """The indexes to mark: the system prompt, and the message before the last user message."""
    chosen = [i for i, m in enumerate(messages[:1]) if m.get("role") == "system"]
    last_user = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None
    )
    if last_user is not None and last_user - 1 >= 0 and last_user - 1 not in chosen:
        chosen.append(last_user - 1)
    return chosen


def _mark(message: Message) -> Message:
    """``message`` with a ``cache_control`` mark where litellm looks for it: on its last block."""
    if message.get("role") == "tool":
        return {**message, "cache_control": dict(EPHEMERAL)}
    tool_calls: Any = message.get("tool_calls")
    if isinstance(tool_calls, list) and tool_calls and isinstance(tool_calls[-1], dict):
        # Anthropic puts tool_use blocks after the text: the last call ends the message.
        last_call = {**tool_calls[-1], "cache_control": dict(EPHEMERAL)}
        return {**message, "tool_calls": [*tool_calls[:-1], last_call]}
    content = message.get("content")
    if isinstance(content, str) and content:
        block = {"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}
        return {**message, "content": [block]}
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        last = {**content[-1], "cache_control": dict(EPHEMERAL)}
        return {**message, "content": [*content[:-1], last]}
    return message
