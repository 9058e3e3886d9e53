"""The model edge: litellm (every model call) and local llama.cpp models, behind the Model protocol.

What litellm knows about a model (its route, its price, its output limit) is asked here, and only
for a litellm model: a scripted model or a program's own never imports litellm (seconds).

Map:
    _import.py        the one place that imports litellm (lazily) and sets its catalog switches
    _litellm.py       LiteLLMModel: every model call goes through litellm.acompletion here
    _cache_control.py  Anthropic prompt-cache breakpoints on the request sent
    _local.py         local/<name> models: LocalModel, and the names of the local edge
    _local_provider.py  the litellm provider ``local`` (register_local_models)
    _local_engine.py  the llama.cpp engine behind them: weights, tool prompts, tool-call parsing
"""

from typing import Any

from usage import max_output_tokens

from .._model import Model
from ._litellm import LiteLLMModel
from ._local import LocalModel, LocalModelUnavailable, is_local_model, register_local_models

__all__ = [
    "LiteLLMModel",
    "LocalModel",
    "LocalModelUnavailable",
    "model_for",
    "output_limit",
    "register_local_models",
]


def model_for(name: str, **completion_kwargs: Any) -> LiteLLMModel:
    """The model a model string names: a :class:`LocalModel` for ``local/<name>`` (checked
    now: a missing extra fails here), else a :class:`LiteLLMModel` (the client is lazy)."""
    if is_local_model(name):
        return LocalModel(name, **completion_kwargs)
    return LiteLLMModel(name, **completion_kwargs)


def output_limit(model: Model) -> int | None:
    """The most output tokens one call of ``model`` can produce, from litellm's bundled table;
    None when the table does not list it, and for a model that is not litellm's, whatever its
    name (a scripted ``openai/gpt-4o-mini`` is not OpenAI's: its limits are its own). For a
    litellm model, the first call imports litellm (seconds), if no call has yet."""
    if not isinstance(model, LiteLLMModel):
        return None
    return max_output_tokens(model.name)
