"""The model edge: litellm (every model call) and local llama.cpp models, behind the Model protocol.

Map:
    _import.py        the one place that imports litellm (lazily) and sets its catalog switches
    _litellm.py       LiteLLMModel: every model call goes through litellm.acompletion here
    _cache_control.py  Anthropic prompt-cache breakpoints on the request sent
    _local.py         local/<name> models: LocalModel, and the names of the local edge
    _local_provider.py  the litellm provider ``local`` (register_local_models)
    _local_engine.py  the llama.cpp engine behind them: weights, tool prompts, tool-call parsing
"""

from typing import Any

from ._litellm import LiteLLMModel
from ._local import LocalModel, LocalModelUnavailable, is_local_model, register_local_models

__all__ = [
    "LiteLLMModel",
    "LocalModel",
    "LocalModelUnavailable",
    "model_for",
    "register_local_models",
]


def model_for(name: str, **completion_kwargs: Any) -> LiteLLMModel:
    """The model a model string names: a :class:`LocalModel` for ``local/<name>`` (checked
    now: a missing extra fails here), else a :class:`LiteLLMModel` (the client is lazy)."""
    if is_local_model(name):
        return LocalModel(name, **completion_kwargs)
    return LiteLLMModel(name, **completion_kwargs)
