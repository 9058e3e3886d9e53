"""Helpers shared by the test packages.

Map:
    litellm_http.py   calling models through litellm's real HTTP path against a ScriptedServer
    loop_guard.py     what event loops reported during a test (the root conftest fails on it)
"""

from .litellm_http import API_KEY, MODEL, litellm_kwargs, litellm_model, wait_until

__all__ = ["API_KEY", "MODEL", "litellm_kwargs", "litellm_model", "wait_until"]
