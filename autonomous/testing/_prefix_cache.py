"""Prompt prefix caching as OpenAI reports it, simulated for the scripted server and benchmarks.

OpenAI caches a prompt's prefix automatically and reports the part it found in
``usage.prompt_tokens_details.cached_tokens``: only for prompts of 1,024 tokens or more, and in
whole blocks (the first 1,024 tokens, then increments of 128). :class:`PrefixCache` reproduces
that from the request body alone, deterministically:

- **Tokens are estimated at 4 characters each** over the request's canonical text
  (:func:`prompt_text`): the tool specs, then each message, as compact JSON in the key order
  they were sent. Not litellm's token counter: it is slower by orders of magnitude on long
  prompts, depends on which tokenizer a litellm version bundles for a model, and the issue's
  figures use 4 characters a token; the estimate only needs to be stable, not exact.
- **Key order counts.** A provider renders messages through its own template, but a client
  whose key order drifts is likely to drift in what the template sees too, so a reordered dict is
  a changed prefix here: the simulation is stricter than a provider, never looser.
- **A prefix is cached by blocks**: 128 tokens (512 characters) each, identified by a chained
  hash of everything up to the block's end, as prefix caches keep them. A request's cached
  tokens are its longest run of leading blocks that some earlier request of the same session
  also had, rounded as OpenAI rounds (:func:`billable_cached_tokens`).
- **A session** is the request's model with its ``prompt_cache_key`` (OpenAI's routing hint) or,
  without one, its ``user``; a request with neither shares one cache per model. Entries never
  expire: a test or benchmark runs for minutes, inside a provider's retention.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

__all__ = [
    "BLOCK_TOKENS",
    "CHARS_PER_TOKEN",
    "MIN_CACHED_TOKENS",
    "PrefixCache",
    "PromptUsage",
    "billable_cached_tokens",
    "common_prefix_tokens",
    "estimate_tokens",
    "prompt_text",
]

#: Characters per estimated token.
CHARS_PER_TOKEN = 4
#: Tokens in one cache block: cached tokens grow in steps of this many.
BLOCK_TOKENS = 128
#: The shortest prompt, and the shortest cached prefix, a provider caches (tokens).
MIN_CACHED_TOKENS = 1024

_BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN


@attrs.frozen
class PromptUsage:
    """What a provider would report for one request's prompt: all its tokens, the cached part."""

    prompt_tokens: int
    cached_tokens: int


def prompt_text(body: Mapping[str, Any]) -> str:
    """The canonical text of a chat request's prompt: its tools, then its messages, one a line.

    Compact JSON, non-ASCII kept, keys in the order sent. Tools come first because a provider
    puts them ahead of the conversation, so a changed tool spec invalidates everything after.
    """
    parts = [_compact(body.get("tools") or [])]
    parts.extend(_compact(message) for message in body.get("messages") or [])
    return "\n".join(parts)


def estimate_tokens(text: str) -> int:
    """The estimated token count of ``text``: a token per 4 characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def common_prefix_tokens(a: str, b: str) -> int:
    """How many whole estimated tokens ``a`` and ``b`` share from their start."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared // CHARS_PER_TOKEN


def billable_cached_tokens(matched_tokens: int, prompt_tokens: int) -> int:
    """The cached tokens a provider reports for a prompt whose first ``matched_tokens`` were seen.

    Zero below 1,024 tokens (of prompt or of match); else the match in whole 128-token blocks,
    never more than the prompt.
    """
    if matched_tokens < 0 or prompt_tokens < 0:
        raise ValueError(f"token counts must be >= 0, got {matched_tokens}, {prompt_tokens}")
    matched = min(matched_tokens, prompt_tokens)
    if prompt_tokens < MIN_CACHED_TOKENS or matched < MIN_CACHED_TOKENS:
        return 0
    return matched // BLOCK_TOKENS * BLOCK_TOKENS


class PrefixCache:
    """The prefixes a provider has seen, per session; :meth:`observe` reports and remembers one.

    Safe to call from several threads (the scripted server answers on one thread a connection).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocks: dict[tuple[str, str], set[bytes]] = {}

    def observe(self, body: Mapping[str, Any]) -> PromptUsage:
        """The usage a provider would report for the chat request ``body``; its blocks are kept.

        Cached tokens count the blocks earlier requests of the same session had, not this one's.
        """
        text = prompt_text(body)
        prompt_tokens = estimate_tokens(text)
        digests = list(_block_digests(text))
        with self._lock:
            seen = self._blocks.setdefault(session_key(body), set())
            matched = 0
            for digest in digests:
                if digest not in seen:
                    break
                matched += 1
            seen.update(digests)
        return PromptUsage(
            prompt_tokens, billable_cached_tokens(matched * BLOCK_TOKENS, prompt_tokens)
        )

    def clear(self) -> None:
        """Forget every prefix seen."""
        with self._lock:
            self._blocks.clear()


def session_key(body: Mapping[str, Any]) -> tuple[str, str]:
    """The cache a request reads and fills: its model, with its ``prompt_cache_key`` or ``user``."""
    key = body.get("prompt_cache_key") or body.get("user") or ""
    return str(body.get("model", "")), str(key)


def _block_digests(text: str) -> Iterator[bytes]:
    """A digest per whole block of ``text``, each covering everything up to the block's end."""
    previous = b""
    for end in range(_BLOCK_CHARS, len(text) + 1, _BLOCK_CHARS):
        block = text[end - _BLOCK_CHARS : end].encode("utf-8", "surrogatepass")
        previous = hashlib.blake2b(previous + block, digest_size=16).digest()
        yield previous


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
