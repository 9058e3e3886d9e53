"""The model edge: litellm (every model call) and local llama.cpp models, behind the Model protocol.

Map:
    _litellm.py       LiteLLMModel: the one place that imports litellm and sets its switches
    _local.py         local/<name> models: litellm provider registration, LocalModel
    _local_engine.py  the llama.cpp engine behind them: weights, tool prompts, tool-call parsing
"""

from ._litellm import LiteLLMModel
from ._local import LocalModelUnavailable, register_local_models

__all__ = ["LiteLLMModel", "LocalModelUnavailable", "register_local_models"]
