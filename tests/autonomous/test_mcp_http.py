"""MCP servers over streamable HTTP: the toolbox server (tests/mcp_servers/toolbox.py) on
127.0.0.1, in a subprocess, called through runs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from autonomous import ModelResponse, StopReason, run_autonomous
from autonomous.mcp import MCPServer, MCPServerError
from autonomous.testing import ScriptedModel, call, calls, done, reply

from .mcp_support import Offered, agent, free_port, http_toolbox

pytestmark = [pytest.mark.anyio, pytest.mark.mcp]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of one HTTP toolbox for the module's tests."""
    with http_toolbox(tmp_path_factory.mktemp("http")) as found:
        yield found


class TestOverHTTP:
    async def test_tools_are_called_errors_answered_and_a_timeout_leaves_the_session_usable(
        self, url: str
    ) -> None:
        """echo answers, fail is the tool's error, block is timed out by tool_timeout, and
        echo still answers after it."""
        model = Offered(
            calls(
                [("echo", {"text": "one"}), ("fail", {}), ("block", {}), ("echo", {"text": "two"})]
            ),
            done(),
            reply("ok"),
        )
        server = MCPServer.http(url, headers={"X-Test": "yes"})
        result = await run_autonomous(
            agent(ScriptedModel(default=model), [server]), "http", max_turns=1, tool_timeout=1
        )
        assert StopReason.COMPLETED == result.reason
        one, failed, blocked, two = model.results()[:4]
        assert ("one", "two") == (one, two)
        assert "the disk is on fire" in failed
        assert "error: tool block timed out after 1 s" == blocked

    async def test_a_list_change_is_seen_by_a_later_model_call(self, url: str) -> None:
        """A tool added during a call is offered once the server's notice (on its own
        listen stream over HTTP, so it may come just after the call's answer) is in."""
        offered: list[list[str]] = []

        async def script(messages: Sequence[Any], tools: Sequence[Any]) -> ModelResponse:
            offered.append([t["function"]["name"] for t in tools])
            if len(offered) == 1:
                return call("add_tool")
            last = messages[-1]["content"]
            if last.startswith("acknowledged"):  # the done tool's answer: the turn ends
                return reply("ok")
            if "extra" in offered[-1]:
                return done() if last == "4" else call("extra", {"x": 2})
            await anyio.sleep(0.05)  # the notice is on its way: ask again
            return call("echo", {"text": "waiting"})

        build = agent(ScriptedModel(default=script), [MCPServer.http(url)])
        result = await run_autonomous(build, "grow", max_turns=1, max_model_calls_per_turn=100)
        assert StopReason.COMPLETED == result.reason
        assert "extra" not in offered[0] and "extra" in offered[-1]

    async def test_a_url_nobody_answers_fails_the_start(self) -> None:
        """Nothing listens on the port: the start fails naming the server."""
        server = MCPServer.http(f"http://127.0.0.1:{free_port()}/mcp", name="gone")
        with pytest.raises(MCPServerError, match="'gone'"):
            await run_autonomous(agent(ScriptedModel([reply("x")]), [server]), "go", max_turns=1)


def test_http_needs_an_http_url(tmp_path: Path) -> None:
    """A URL that is not http or https is refused when the server is described."""
    with pytest.raises(ValueError, match="http:// or https://"):
        MCPServer.http("ftp://example.org/mcp")
