"""Local models: ``local/<name>`` runs a small GGUF model in this process with llama.cpp.

``register_local_models()`` adds litellm's ``local`` provider (``Agent("local/smollm2")`` also
registers it on first use); :class:`LocalModelUnavailable` says what is missing when the
``[local]`` extra is not installed. Importing this module imports neither llama.cpp nor litellm:
registering does. The models themselves are described in autonomous/_models/_local.py.
"""

from ._models._local import LocalModelUnavailable, register_local_models

__all__ = ["LocalModelUnavailable", "register_local_models"]
