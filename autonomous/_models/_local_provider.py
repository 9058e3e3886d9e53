"""The litellm custom provider ``local``: ``local/<name>`` models served by a LocalEngine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from .._errors import ConfigurationError
from ._import import load_litellm
from ._local_engine import LOCAL_PROVIDER, LocalEngine, _chat_in_thread, _require_llama_cpp


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
    litellm = load_litellm()
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
