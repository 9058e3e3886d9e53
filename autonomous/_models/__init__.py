"""The model edge: litellm (every model call) and local llama.cpp models, behind the Model protocol.

Map:
    _import.py        the one place that imports litellm (lazily) and sets its catalog switches
    _litellm.py       LiteLLMModel: every model call goes through litellm.acompletion here
    _local.py         local/<name> models: LocalModel, and the names of the local edge
    _local_provider.py  the litellm provider ``local`` (register_local_models)
    _local_engine.py  the llama.cpp engine behind them: weights, tool prompts, tool-call parsing
"""

from ._litellm import LiteLLMModel
from ._local import LocalModelUnavailable, register_local_models

__all__ = ["LiteLLMModel", "LocalModelUnavailable", "register_local_models"]
