"""Calling models through litellm's real HTTP path against a ScriptedServer on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from autonomous._models._litellm import LiteLLMModel
from autonomous.testing._server import ScriptedServer

#: A litellm model string routed to the OpenAI-compatible scripted server.
MODEL = "openai/scripted-model"
#: Any key will do: the scripted server does not check it, litellm insists on one.
API_KEY = "test-key"


def litellm_kwargs(server: ScriptedServer) -> dict[str, Any]:
    """The completion keywords pointing litellm at ``server`` (for ``Agent(..., **kwargs)``)."""
    return {"api_base": server.api_base, "api_key": API_KEY}


def litellm_model(server: ScriptedServer, **completion_kwargs: Any) -> LiteLLMModel:
    """A LiteLLMModel on :data:`MODEL` that talks to ``server``."""
    return LiteLLMModel(MODEL, **litellm_kwargs(server), **completion_kwargs)


async def wait_until(condition: Callable[[], bool], *, within: float = 5.0) -> None:
    """Poll ``condition`` (state a server thread updates) until it holds, for ``within`` seconds."""
    with anyio.fail_after(within):
        while True:
            if condition():
                return
            await anyio.sleep(0.01)
