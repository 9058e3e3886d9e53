"""Bytes from the model or a tool never end a run or poison a session: results whose rendering
raises, lone surrogates, and arguments nested past the JSON parser's limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog

from autonomous import Agent, StopReason, Tool, function_tool, run_autonomous
from autonomous.testing import ScriptedModel, call, done, reply
from autonomous.testing._server import ScriptedServer
from autonomous.testing._server import call as http_call
from autonomous.testing._server import reply as http_reply
from eventlog import SessionRef, SqliteEventLog

from ..support.litellm_http import API_KEY, MODEL

pytestmark = pytest.mark.anyio

SURROGATE = "\ud800"


class Unprintable:
    """A value whose __str__ and __repr__ raise."""

    def __str__(self) -> str:
        raise RuntimeError("cannot print me")

    __repr__ = __str__


class Unsayable(Exception):
    """An exception whose message cannot be rendered."""

    def __str__(self) -> str:
        raise RuntimeError("no words")


def tool_returning(value: Any, *, name: str = "probe") -> Tool:
    """A tool ``name`` that returns ``value``."""

    async def probe(path: str = "/") -> Any:
        """Probe path."""
        return value

    return function_tool(probe, name=name)


async def raising_tool(path: str = "/") -> str:
    """Fail with an exception whose message cannot be rendered."""
    raise Unsayable


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    """The content of every tool message, in order."""
    return [m["content"] for m in messages if m["role"] == "tool"]


def encodable(messages: list[dict[str, Any]]) -> bool:
    """Whether the request could be sent: its JSON encodes as UTF-8."""
    json.dumps(messages, ensure_ascii=False).encode("utf-8")
    return True


async def run_with(model: ScriptedModel, *tools: Tool, session: SessionRef | None = None) -> Any:
    """Run the scripted model with ``tools`` for at most three turns."""
    return await run_autonomous(
        lambda extra: Agent(model, tools=[*tools, *extra], session=session), "go", max_turns=3
    )


def script_then_done(*first: Any) -> list[Any]:
    """The given steps, then the done tool and a final answer."""
    return [*first, done("finished"), reply("bye")]


class TestUnrenderableResults:
    """A tool result or error that cannot be rendered is an error answer; the run goes on."""

    @pytest.mark.parametrize(
        "value",
        [Unprintable(), 10**5000, {"n": 10**5000}, [Unprintable()]],
        ids=["str_raises", "long_int", "dict_long_int", "list_str_raises"],
    )
    async def test_the_model_is_told_and_the_run_completes(self, value: Any) -> None:
        """The call is answered 'error: ... could not be rendered' and the run completes."""
        model = ScriptedModel(script_then_done(call("probe", {})))
        result = await run_with(model, tool_returning(value))
        assert StopReason.COMPLETED == result.reason
        answer = tool_results(model.last_messages)[0]
        assert answer.startswith("error: the tool's result could not be rendered"), answer

    async def test_an_exception_whose_message_raises(self) -> None:
        """A tool raising an exception whose str() raises is answered with its type."""
        model = ScriptedModel(script_then_done(call("raising_tool", {})))
        result = await run_with(model, function_tool(raising_tool))
        assert StopReason.COMPLETED == result.reason
        answer = tool_results(model.last_messages)[0]
        assert answer.startswith("error: Unsayable (its message could not be rendered)"), answer


class TestLoneSurrogates:
    """Lone surrogates are replaced where they come in, and the session stays usable."""

    async def test_in_a_model_answer(self, tmp_path: Path) -> None:
        """A surrogate in the answer text is replaced; later requests and the log encode."""
        async with SqliteEventLog(tmp_path / "runs.db") as log:
            ref = SessionRef(log, "test", "tester", "s1")
            with structlog.testing.capture_logs() as logs:
                model = ScriptedModel([reply(f"bad {SURROGATE} text"), *script_then_done()])
                result = await run_with(model, session=ref)
            assert (StopReason.COMPLETED, 2) == (result.reason, result.turns)
            assert encodable(model.last_messages)
            assert "bad \ufffd text" in [m.get("content") for m in model.last_messages]
        assert [{"where": "model_answer", "field": "text"}] == [
            {"where": e["where"], "field": e["field"]} for e in logs if e["event"] == "text_cleaned"
        ]

    async def test_in_tool_call_arguments(self) -> None:
        """A surrogate in the raw argument text is replaced before the tool sees it."""
        seen: list[str] = []

        async def probe(path: str) -> str:
            """Probe path."""
            seen.append(path)
            return "ok"

        raw = '{"path": "/x' + SURROGATE + '"}'
        model = ScriptedModel(script_then_done(call("probe", raw)))
        result = await run_with(model, function_tool(probe))
        assert (StopReason.COMPLETED, ["/x\ufffd"]) == (result.reason, seen)
        assert encodable(model.last_messages)

    async def test_in_a_tool_result(self) -> None:
        """A tool returning a surrogate is answered with U+FFFD in its place, logged once."""
        model = ScriptedModel(script_then_done(call("probe", {})))
        with structlog.testing.capture_logs() as logs:
            result = await run_with(model, tool_returning(f"disk {SURROGATE} full"))
        assert StopReason.COMPLETED == result.reason
        assert "disk \ufffd full" == tool_results(model.last_messages)[0]
        assert encodable(model.last_messages)
        assert ["tool_result"] == [e["where"] for e in logs if e["event"] == "text_cleaned"]

    async def test_in_a_rejection_quoting_the_models_key(self) -> None:
        """A control-tool rejection quoting an escaped surrogate key stays encodable."""
        model = ScriptedModel(script_then_done(call("report_done", '{"\\ud800": 1}')))
        result = await run_with(model)
        assert StopReason.COMPLETED == result.reason
        assert encodable(model.last_messages)

    async def test_over_http_the_next_request_encodes(
        self, scripted_server: ScriptedServer
    ) -> None:
        """Through litellm: a surrogate in the answer and in a tool result never reach the wire
        (every request after them is sent and the run completes)."""
        scripted_server.push(
            http_reply(f"half {SURROGATE} answer"),
            http_call("probe", {"path": "/"}),
            http_call("report_done", {"state": "done"}),
            http_reply("bye"),
        )
        tool = tool_returning(f"odd {SURROGATE} bytes")
        result = await run_autonomous(
            lambda extra: Agent(
                MODEL, tools=[tool, *extra], api_base=scripted_server.api_base, api_key=API_KEY
            ),
            "go",
            max_turns=3,
        )
        assert (StopReason.COMPLETED, None) == (result.reason, result.error)
        sent = scripted_server.requests[-1]["messages"]
        contents = [m.get("content") for m in sent]
        assert "half \ufffd answer" in contents and "odd \ufffd bytes" in contents


class TestDeepArguments:
    """Arguments nested past the JSON parser's limit are named as such."""

    async def test_a_tool_call_is_answered_and_the_run_goes_on(self) -> None:
        """The call is answered 'invalid arguments ... nested too deeply'; the run completes."""
        model = ScriptedModel(script_then_done(call("probe", "[" * 100_000)))
        result = await run_with(model, tool_returning("ok"))
        assert StopReason.COMPLETED == result.reason
        answer = tool_results(model.last_messages)[0]
        assert answer.startswith("error: invalid arguments for probe: arguments are nested too")

    async def test_a_control_tool_call_is_rejected(self) -> None:
        """The done tool with such arguments answers 'rejected: ... nested too deeply'."""
        model = ScriptedModel(script_then_done(call("report_done", '{"a":' * 100_000)))
        result = await run_with(model)
        assert StopReason.COMPLETED == result.reason
        answer = tool_results(model.last_messages)[0]
        assert answer.startswith("rejected: arguments are nested too deeply"), answer

    async def test_over_http_the_model_error_names_the_cause(
        self, scripted_server: ScriptedServer
    ) -> None:
        """litellm cannot read such a response: the ModelError says why, not 'Invalid response
        object'."""
        scripted_server.push(http_call("probe", "[" * 100_000))
        result = await run_autonomous(
            lambda extra: Agent(
                MODEL,
                tools=[tool_returning("ok"), *extra],
                api_base=scripted_server.api_base,
                api_key=API_KEY,
            ),
            "go",
            max_turns=1,
        )
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        message = str(result.error)
        assert "nested too deeply" in message and "Invalid response object" not in message
        assert len(message) < 500
