"""Helpers shared by the test packages.

Map:
    litellm_http.py   calling models through litellm's real HTTP path against a ScriptedServer
"""

from .litellm_http import API_KEY, MODEL, litellm_kwargs, litellm_model, wait_until

__all__ = ["API_KEY", "MODEL", "litellm_kwargs", "litellm_model", "wait_until"]
