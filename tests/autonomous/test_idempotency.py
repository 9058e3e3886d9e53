"""Idempotent tools and the idempotency key: every call has a stable (session, turn, index) key
that the tool reads from ``current_tool_call()`` or an ``idempotency_key`` parameter."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from autonomous import (
    Agent,
    StopReason,
    Tool,
    ToolCallContext,
    current_tool_call,
    function_tool,
    run_autonomous,
)
from autonomous._tools._schema import json_schema_for
from autonomous._tools._tools import parse_arguments, tool_call_context
from autonomous.testing import ScriptedModel, call, calls, done, reply

from .helpers import memory_session

pytestmark = pytest.mark.anyio


class Recorder:
    """Tools that record the key they were given, and from where."""

    def __init__(self) -> None:
        self.contexts: list[ToolCallContext | None] = []
        self.keys: list[str] = []
        self.threads: list[str] = []

    async def look(self, what: str) -> str:
        """Look at what (reads the context variable)."""
        self.contexts.append(current_tool_call())
        return "seen"

    async def charge(self, amount: int, *, idempotency_key: str) -> str:
        """Charge amount (gets the key as a keyword)."""
        self.keys.append(idempotency_key)
        return "charged"

    def sync_charge(self, amount: int, idempotency_key: str = "") -> str:
        """Charge amount from a worker thread."""
        self.threads.append(threading.current_thread().name)
        self.keys.append(idempotency_key)
        context = current_tool_call()
        self.contexts.append(context)
        return "charged"

    @property
    def tools(self) -> list[Tool]:
        """The three tools."""
        return [
            function_tool(self.look),
            function_tool(self.charge, idempotent=True),
            function_tool(self.sync_charge),
        ]


class TestToolCallContext:
    """The frozen value and its key."""

    def test_the_key_is_session_turn_index(self) -> None:
        """idempotency_key is '<session>:<turn>:<index>'."""
        ctx = ToolCallContext(session="app/user/s1", turn=3, index=2, call_id="call_9")
        assert "app/user/s1:3:2" == ctx.idempotency_key

    def test_outside_a_call_there_is_none(self) -> None:
        """current_tool_call() is None outside a tool call, and restored after one."""
        ctx = ToolCallContext(session="s", turn=1, index=0, call_id="c")
        assert current_tool_call() is None
        with tool_call_context(ctx):
            assert ctx is current_tool_call()
        assert current_tool_call() is None


class TestIdempotentFlag:
    def test_function_tool_marks_idempotent_tools(self) -> None:
        """idempotent=True is kept on the Tool; the default is False."""

        async def f() -> None:
            """F."""

        assert (True, False) == (
            function_tool(f, idempotent=True).idempotent,
            function_tool(f).idempotent,
        )

    def test_a_tool_built_directly_is_not_idempotent(self) -> None:
        """Tool(...) without the flag still builds, not idempotent."""

        async def fn(**_: Any) -> str:
            return ""

        tool = Tool("t", "T.", {"type": "object", "properties": {}}, fn)
        assert tool.idempotent is False
        assert Tool("t", "T.", {"type": "object"}, fn, idempotent=True).idempotent


class TestHiddenParameter:
    def test_the_key_parameter_is_not_in_the_schema(self) -> None:
        """idempotency_key is filled by the runtime: the model never sees it."""
        recorder = Recorder()
        for fn in (recorder.charge, recorder.sync_charge):
            schema = json_schema_for(fn)
            assert ["amount"] == list(schema["properties"]), schema
            assert ["amount"] == schema["required"]

    def test_a_model_supplied_key_is_an_unknown_argument(self) -> None:
        """The model cannot pass its own key."""
        tool = function_tool(Recorder().charge)
        with pytest.raises(ValueError, match="unknown argument 'idempotency_key'"):
            parse_arguments(tool, '{"amount": 1, "idempotency_key": "mine"}')


class TestKeysInARun:
    async def test_every_call_gets_a_distinct_stable_key(self) -> None:
        """Keys count the turn's calls across its model calls; the tool reads them both ways."""
        recorder, ref = Recorder(), memory_session()
        model = ScriptedModel(
            [
                calls([("look", {"what": "a"}), ("charge", {"amount": 1})]),
                call("sync_charge", {"amount": 2}),
                reply("turn 1 done"),
                calls([("charge", {"amount": 3}), ("report_done", {"state": "done"})]),
                reply("bye"),
            ]
        )
        result = await run_autonomous(
            lambda extra: Agent(model, tools=[*recorder.tools, *extra], session=ref),
            "go",
            max_turns=3,
        )
        assert StopReason.COMPLETED == result.reason
        session = str(ref.key)
        assert [f"{session}:1:1", f"{session}:1:2", f"{session}:2:0"] == recorder.keys
        looked, in_thread = recorder.contexts
        assert looked is not None and in_thread is not None
        assert (session, 1, 0) == (looked.session, looked.turn, looked.index)
        assert f"{session}:1:2" == in_thread.idempotency_key
        assert recorder.threads and recorder.threads[0] != threading.main_thread().name

    async def test_the_context_is_cleared_after_the_call(self) -> None:
        """No tool call context leaks out of the dispatch into the run."""
        seen: list[ToolCallContext | None] = []

        async def before_turn(turn: int) -> None:
            seen.append(current_tool_call())

        recorder = Recorder()
        model = ScriptedModel([call("look", {"what": "x"}), reply("a"), done(), reply("b")])
        await run_autonomous(
            lambda extra: Agent(model, tools=[*recorder.tools, *extra]),
            "go",
            before_turn=before_turn,
            max_turns=3,
        )
        assert [None, None] == seen
