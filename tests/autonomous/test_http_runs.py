"""Whole runs through litellm's real HTTP path against the scripted server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from autonomous import (
    Agent,
    ModelError,
    RetryDecision,
    StopReason,
    Tool,
    function_tool,
    run_autonomous,
    start_autonomous,
)
from autonomous.testing._server import ScriptedServer, call, error, hang, reply
from usage import Pricing, Tracker

from ..support.litellm_http import API_KEY, MODEL, wait_until
from .helpers import memory_session

pytestmark = pytest.mark.anyio


async def check_disk(path: str) -> str:
    """Report the disk usage of path."""
    return f"{path}: 42% used"


def http_build(
    server: ScriptedServer, model: str = MODEL, **kwargs: Any
) -> Callable[[list[Tool]], Agent]:
    """A build function for an Agent on a litellm model string pointed at ``server``."""

    def build(extra: list[Tool]) -> Agent:
        return Agent(
            model,
            instructions="Watch the disk.",
            tools=[function_tool(check_disk), *extra],
            api_base=server.api_base,
            api_key=API_KEY,
            **kwargs,
        )

    return build


class TestHttpRuns:
    async def test_a_run_completes_over_http(self, scripted_server: ScriptedServer) -> None:
        """Tool call, done tool and final answer travel through litellm; usage adds up."""
        scripted_server.push(
            call("check_disk", {"path": "/"}, input_tokens=100, output_tokens=10),
            call(
                "report_done",
                {"state": "done", "detail": "disk fine"},
                input_tokens=120,
                output_tokens=12,
            ),
            reply("Disk is at 42%.", input_tokens=130, output_tokens=8),
        )
        result = await run_autonomous(http_build(scripted_server), "watch disk usage", max_turns=5)
        assert (StopReason.COMPLETED, "disk fine", "Disk is at 42%.") == (
            result.reason,
            result.done_detail,
            result.final_text,
        )
        assert (350, 30) == (result.input_tokens, result.output_tokens)
        sent = scripted_server.requests[1]["messages"]
        assert {"role": "tool", "content": "/: 42% used"} == {
            k: sent[-1][k] for k in ("role", "content")
        }
        tool_names = [t["function"]["name"] for t in scripted_server.requests[0]["tools"]]
        assert ["check_disk", "report_done"] == tool_names

    async def test_streamed_usage_is_counted_once(self, scripted_server: ScriptedServer) -> None:
        """A streaming model's tokens are counted once per call and its text is final_text."""
        scripted_server.push(
            call("report_done", {"state": "done"}, input_tokens=50, output_tokens=5),
            reply("streamed words", input_tokens=60, output_tokens=7),
        )
        tracker = Tracker()
        result = await run_autonomous(
            http_build(scripted_server, stream=True), "go", tracker=tracker
        )
        assert (110, 12, "streamed words") == (
            result.input_tokens,
            result.output_tokens,
            result.final_text,
        )
        assert 2 == tracker.totals.calls

    async def test_known_models_are_priced_from_litellms_table(
        self, scripted_server: ScriptedServer
    ) -> None:
        """With no pricing given, a model in litellm's price table is priced from it."""
        scripted_server.push(
            call("report_done", {"state": "done"}, input_tokens=1_000_000, output_tokens=0),
            reply("ok", input_tokens=0, output_tokens=1_000_000),
        )
        result = await run_autonomous(http_build(scripted_server, "openai/gpt-4o-mini"), "go")
        expected = Pricing.for_model("gpt-4o-mini")
        assert expected.input_per_mtok + expected.output_per_mtok == pytest.approx(result.cost_usd)

    async def test_http_errors_go_to_the_retry_policy(
        self, scripted_server: ScriptedServer
    ) -> None:
        """A 500 is a ModelError for the retry policy; a retry reaches the next answer."""
        scripted_server.push(
            error(500, "overloaded"),
            call("report_done", {"state": "done"}),
            reply("done"),
        )
        errors: list[BaseException] = []

        def policy(exc: BaseException, attempt: int) -> RetryDecision:
            errors.append(exc)
            return RetryDecision.RETRY_TURN

        result = await run_autonomous(http_build(scripted_server), "go", retry_policy=policy)
        assert StopReason.COMPLETED == result.reason
        assert 1 == len(errors) and isinstance(errors[0], ModelError)
        assert 3 == scripted_server.request_count  # no hidden litellm retries

    async def test_stop_cancels_an_in_flight_http_call(
        self, scripted_server: ScriptedServer
    ) -> None:
        """stop() aborts a hung HTTP request; the server sees the client go away."""
        scripted_server.push(hang())
        ref = memory_session()

        def build(extra: list[Tool]) -> Agent:
            agent = http_build(scripted_server)(extra)
            agent.session = ref
            return agent

        async with start_autonomous(build, "go") as handle:
            await handle.ready()
            await wait_until(lambda: scripted_server.request_count == 1)
            with anyio.fail_after(5):
                await handle.stop()
        result = await handle.wait()
        assert StopReason.CONTEXT_CANCELLED == result.reason
        await wait_until(lambda: scripted_server.disconnects == 1)
