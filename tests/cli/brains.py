"""The tools and scripted models the CLI tests' specs name (copied next to each spec).

- ``quick``: reports done at once.
- ``looping``: calls ``tick`` every turn and never finishes, until an inbox message arrives;
  then it reports done with the inbox block as the detail.
- ``deferring``: schedules its next turn one second ahead (``next_prompt`` "wake up"), then
  reports done on the next turn, with any inbox block in the detail.
- ``napping``: schedules its next turn an hour ahead, then reports done on the next turn.
- ``always_deferring``: schedules its next turn one second ahead, every turn, never done.
- ``deferring_then_failing``: defers like ``deferring``, then every model call raises
  ``RuntimeError("the disk tool broke")``.
- ``deferring_then_looping``: defers like ``deferring``, then ticks like ``looping`` until an
  inbox message arrives (a resume that holds its session until told to finish).
- ``alerting``: reports done at once with the outcome ``alert`` (its spec declares outcomes).
- ``caching``: as ``quick``, each call billed 12,400 prompt tokens, 11,904 of them cached.
- ``hanging``: calls ``hang`` (which sleeps a minute) in its first turn; told that the call was
  interrupted, it reports done.
- ``napping_tool``: calls ``nap`` (a sync tool that sleeps 30 s), then reports done.
- ``offloading``: as ``napping_tool``, with ``offloaded_nap`` (an async tool that sleeps
  30 s in anyio's worker thread itself).
- ``deferring_then_napping``: defers like ``deferring``, then (resumed) calls ``nap``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread
import attrs

from autonomous import ModelResponse
from autonomous.testing import ScriptedModel, call, reply
from usage import Usage

Messages = Sequence[dict[str, Any]]


def tick(n: int = 0) -> int:
    """Wait a tenth of a second, then return n plus one.

    Args:
        n: A number.
    """
    time.sleep(0.1)
    return n + 1


def hang() -> str:
    """Sleep a minute (a process killed meanwhile dies in the middle of this call)."""
    time.sleep(60)
    return "woke"


def nap() -> str:
    """Sleep thirty seconds (in a worker thread: a plain function), then say so.

    It leaves a file ``napping.<pid>.<id>`` in the working directory as it starts, so that a
    test knows when the process is inside it.
    """
    Path(f"napping.{os.getpid()}.{uuid.uuid4().hex}").touch()
    time.sleep(30)
    return "rested"


async def offloaded_nap() -> str:
    """Sleep thirty seconds in one of anyio's worker threads (which are not daemons), given up
    when cancelled, as a tool that offloads blocking work itself does; then say so."""
    return await anyio.to_thread.run_sync(nap, abandon_on_cancel=True)


def undocumented(n: int) -> int:
    return n


NOT_CALLABLE = 42


def _prompt(messages: Messages) -> str:
    return next(str(m["content"]) for m in reversed(messages) if m["role"] == "user")


def _inbox(prompt: str) -> str:
    """The inbox block of a prompt, on one line ("" when there is none)."""
    if not prompt.startswith("[Inbox]"):
        return ""
    return " ".join(prompt.split("\n\n", maxsplit=1)[0].split())


def _finish(detail: str) -> ModelResponse:
    return call("report_done", {"state": "done", "detail": detail})


def _quick(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    return _finish("all done") if messages[-1]["role"] == "user" else reply("bye")


def _alerting(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if messages[-1]["role"] != "user":
        return reply("bye")
    return call("report_done", {"state": "done", "detail": "disk at 97%", "outcome": "alert"})


def _looping(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if messages[-1]["role"] != "user":
        return reply("ticked")
    inbox = _inbox(_prompt(messages))
    return _finish(f"finished: {inbox}") if inbox else call("tick", {"n": 1})


def _deferring(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if messages[-1]["role"] != "user":
        return reply("ok")
    prompt = _prompt(messages)
    if "wake up" in prompt or prompt.startswith("[Inbox]"):
        return _finish(f"finished: {_inbox(prompt)}".strip())
    return call("schedule_next_turn", {"wake_in_sec": 1, "next_prompt": "wake up"})


def _napping(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if messages[-1]["role"] != "user":
        return reply("ok")
    if "wake up" in _prompt(messages):
        return _finish("rested")
    return call("schedule_next_turn", {"wake_in_sec": 3600, "next_prompt": "wake up"})


def _always_deferring(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if messages[-1]["role"] != "user":
        return reply("ok")
    return call("schedule_next_turn", {"wake_in_sec": 1, "next_prompt": "wake up"})


def _deferring_then_failing(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if _prompt(messages) == "Do the test thing.":  # the goal: the first turn
        return _deferring(messages, tools)
    raise RuntimeError("the disk tool broke")


def _deferring_then_looping(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if _prompt(messages) == "Do the test thing.":  # the goal: the first turn
        return _deferring(messages, tools)
    return _looping(messages, tools)


def quick() -> ScriptedModel:
    """Done at once."""
    return ScriptedModel(default=_quick)


def looping() -> ScriptedModel:
    """Ticks until an inbox message arrives."""
    return ScriptedModel(default=_looping)


def deferring() -> ScriptedModel:
    """Defers one second, then finishes."""
    return ScriptedModel(default=_deferring)


def napping() -> ScriptedModel:
    """Defers an hour, then finishes."""
    return ScriptedModel(default=_napping)


def always_deferring() -> ScriptedModel:
    """Defers one second, every turn."""
    return ScriptedModel(default=_always_deferring)


def deferring_then_failing() -> ScriptedModel:
    """Defers one second, then (resumed) fails every model call."""
    return ScriptedModel(default=_deferring_then_failing)


def deferring_then_looping() -> ScriptedModel:
    """Defers one second, then (resumed) ticks until an inbox message arrives."""
    return ScriptedModel(default=_deferring_then_looping)


def alerting() -> ScriptedModel:
    """Done at once, with the outcome alert."""
    return ScriptedModel(default=_alerting)


def _caching(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    return attrs.evolve(_quick(messages, tools), usage=Usage(12_400, 5, 11_904))


def caching() -> ScriptedModel:
    """Done at once, most of each prompt read from the provider's cache."""
    return ScriptedModel(default=_caching)


def _hanging(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    last = messages[-1]
    if last["role"] == "tool" and str(last["content"]).startswith("interrupted"):
        return _finish("the hang was interrupted")
    return call("hang") if last["role"] == "user" else reply("ok")


def hanging() -> ScriptedModel:
    """Calls hang, which sleeps a minute; done once told that call was interrupted."""
    return ScriptedModel(default=_hanging)


def _napping_tool(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    last = messages[-1]
    if last["role"] == "user":
        return call("nap", {})
    if last["role"] == "tool" and last["content"] == "rested":
        return _finish("rested")
    return reply("ok")


def napping_tool() -> ScriptedModel:
    """Calls nap (thirty seconds in a sync tool), then finishes."""
    return ScriptedModel(default=_napping_tool)


def _deferring_then_napping(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if _prompt(messages) == "Do the test thing.":  # the goal: the first turn
        return _deferring(messages, tools)
    return _napping_tool(messages, tools)


def _offloading(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if messages[-1]["role"] == "user":
        return call("offloaded_nap", {})
    return _napping_tool(messages, tools)


def offloading() -> ScriptedModel:
    """Calls offloaded_nap (thirty seconds in anyio's worker thread), then finishes."""
    return ScriptedModel(default=_offloading)


def deferring_then_napping() -> ScriptedModel:
    """Defers one second, then (resumed) naps thirty seconds in a sync tool."""
    return ScriptedModel(default=_deferring_then_napping)
