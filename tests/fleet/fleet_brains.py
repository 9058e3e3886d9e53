"""The tools and scripted models of the fleet tests' specs (copied next to each spec).

Every model answer says which process wrote it (``by host:pid`` in its text), and so does every
tool result, so a test can tell from the log alone which daemon wrote what.

- ``waking``: the goal turn schedules "wake 1"; each "wake K" turn schedules "wake K+1" until
  ``FLEET_WAKES`` wakes (environment, default 1) have run, then reports done. The first wake is
  ``FLEET_FIRST_WAKE`` seconds ahead (default 1), the later ones ``FLEET_WAKE_GAP`` (default 1).
- ``gated``: the goal turn schedules "wake 1" like ``waking``; the wake turn calls ``gate``,
  which blocks until the file ``gate`` exists in the working directory, then reports done. A
  run resumed after a crash mid-gate finds the call ``interrupted`` and calls it again.
- ``sleeper``: every turn schedules the next one an hour ahead (a ``sleep`` scheduler keeps the
  run waiting in its process, where an inject wakes it), forever.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autonomous import ModelResponse
from autonomous.testing import ScriptedModel, call, reply

Messages = Sequence[dict[str, Any]]
_WAKE = re.compile(r"^wake (\d+)$")


def identity() -> str:
    """``host:pid`` of the calling process: who wrote an answer or a tool result."""
    return f"{socket.gethostname()}:{os.getpid()}"


def gate(by: str = "") -> str:
    """Wait until the file ``gate`` exists in the working directory, then say who waited.

    Args:
        by: Who asked (the model's process).
    """
    while not Path("gate").exists():
        time.sleep(0.05)
    return f"gate open, by {identity()}"


def _prompt(messages: Messages) -> str:
    return next(str(m["content"]) for m in reversed(messages) if m["role"] == "user")


def _by() -> str:
    return f"by {identity()}"


def _schedule(wake: int, seconds: float) -> ModelResponse:
    args = {"wake_in_sec": seconds, "next_prompt": f"wake {wake}"}
    return call("schedule_next_turn", args, text=_by())


def _finish(detail: str) -> ModelResponse:
    return call("report_done", {"state": "done", "detail": detail}, text=_by())


def _wake_of(messages: Messages) -> int:
    """Which wake this turn is (0: the goal turn)."""
    match = _WAKE.match(_prompt(messages))
    return int(match.group(1)) if match else 0


def _waking(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if messages[-1]["role"] != "user":
        return reply(f"ok {_by()}")
    wake = _wake_of(messages)
    if wake == 0:
        return _schedule(1, float(os.environ.get("FLEET_FIRST_WAKE", "1")))
    if wake < int(os.environ.get("FLEET_WAKES", "1")):
        return _schedule(wake + 1, float(os.environ.get("FLEET_WAKE_GAP", "1")))
    return _finish(f"woke {wake} times")


def _gated(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    last = messages[-1]
    content = str(last.get("content"))
    if _wake_of(messages) == 0:  # the goal turn
        if last["role"] != "user":
            return reply(f"ok {_by()}")
        return _schedule(1, float(os.environ.get("FLEET_FIRST_WAKE", "1")))
    # the wake turn; a run resumed after a crash finds its gate call "interrupted": again
    if last["role"] == "user" or (last["role"] == "tool" and "interrupted" in content):
        return call("gate", {"by": identity()}, text=_by())
    if last["role"] == "tool" and "gate open" in content:
        return _finish("through the gate")
    return reply(f"ok {_by()}")


def _sleeper(messages: Messages, tools: Sequence[dict[str, Any]]) -> ModelResponse:
    if messages[-1]["role"] != "user":
        return reply(f"ok {_by()}")
    return _schedule(1, 3600)


def sleeper() -> ScriptedModel:
    """Sleeps an hour after every turn; an inject wakes it for one more."""
    return ScriptedModel(default=_sleeper)


def waking() -> ScriptedModel:
    """Wakes FLEET_WAKES times, then finishes."""
    return ScriptedModel(default=_waking)


def gated() -> ScriptedModel:
    """Wakes once, waits for the gate file in a tool, then finishes."""
    return ScriptedModel(default=_gated)
