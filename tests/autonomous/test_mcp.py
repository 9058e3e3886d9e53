"""MCP servers as tools, against a real server (tests/mcp_servers/toolbox.py) over stdio: tools
listed and called through runs, error results, our timeout, a server killed mid-call, a list
change, the gate in PLAN mode, a server that cannot start, the trace context, resume."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path

import anyio
import pytest
import structlog
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from autonomous import (
    Agent,
    ConfigurationError,
    StopReason,
    Telemetry,
    function_tool,
    resume_autonomous,
    run_autonomous,
    start_autonomous,
)
from autonomous.mcp import MCPServer, MCPServerError
from autonomous.testing import FakeClock, ScriptedModel, call, calls, done, reply
from eventlog import (
    AssistantMessage,
    Budgets,
    Event,
    EventKind,
    ToolCallRecord,
    ToolResult,
    UserMessage,
)
from permissions import Gate, Mode

from ..support.litellm_http import wait_until
from .helpers import memory_session
from .mcp_support import Offered, agent, toolbox

pytestmark = [pytest.mark.anyio, pytest.mark.mcp]


#: A stdio "server" that starts and never answers (it ends when its stdin closes).
SILENT = ["-c", "import sys; sys.stdin.read()"]
#: The fake seconds each step of failing_while_time_passes moves the clock.
STEP = 1.0


async def failing_while_time_passes(clock: FakeClock, work: Awaitable[object]) -> None:
    """Await ``work``, moving ``clock`` on by STEP every few real milliseconds meanwhile (the
    run's clock is all that may time it out); re-raise what it raises. Fails after ten real
    seconds, as a timeout on real time would have taken longer."""
    failure: list[BaseException] = []

    async def waited() -> None:
        try:
            await work
        except Exception as exc:
            failure.append(exc)
        tg.cancel_scope.cancel()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waited)
            while True:
                await anyio.sleep(0.005)
                clock.advance(STEP)
    if failure:
        raise failure[0]


async def outcomes(ref: object) -> list[str]:
    """The outcome of every tool result in the session's log, in order."""
    events = await ref.log.read(ref.key, kinds=[EventKind.TOOL_RESULT])  # type: ignore[attr-defined]
    return [e.payload.outcome for e in events if isinstance(e.payload, ToolResult)]


class TestToolsInARun:
    async def test_the_servers_tools_are_offered_with_their_schemas_and_called(
        self, tmp_path: Path
    ) -> None:
        """The model is offered the server's tools (their input schemas as given) beside the
        agent's own, and a call's text content is its result."""
        model = Offered(call("echo", {"text": "hello"}), done(), reply("ok"))
        result = await run_autonomous(
            agent(ScriptedModel(default=model), [toolbox(tmp_path)]), "echo", max_turns=1
        )
        assert StopReason.COMPLETED == result.reason
        assert {"echo", "write_note", "fail", "block", "report_done"} <= set(model.tools[0])
        echo = next(s for s in model.specs[0] if s["function"]["name"] == "echo")
        assert {"text": {"title": "Text", "type": "string"}} == echo["function"]["parameters"][
            "properties"
        ]
        assert "hello" == model.results()[0]

    async def test_an_error_result_is_answered_as_the_tools_error(self, tmp_path: Path) -> None:
        """isError: the model reads the server's text as an error; the outcome is error."""
        ref = memory_session()
        model = Offered(call("fail"), done(), reply("ok"))
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path)], session=ref)
        await run_autonomous(build, "fail", max_turns=1)
        answer = model.results()[0]
        assert answer.startswith("error: MCPToolError:") and "the disk is on fire" in answer
        assert "error" == (await outcomes(ref))[0]

    async def test_a_slow_tool_is_timed_out_by_our_timeout_and_the_session_lives_on(
        self, tmp_path: Path
    ) -> None:
        """tool_timeout ends a call that would never return; the next call works."""
        model = Offered(calls([("block", {}), ("echo", {"text": "still here"})]), done())
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path)])
        await run_autonomous(build, "wait", max_turns=1, tool_timeout=0.5)
        assert ["error: tool block timed out after 0.5 s", "still here"] == model.results()[:2]

    async def test_a_server_killed_mid_call_is_answered_interrupted_and_started_again(
        self, tmp_path: Path
    ) -> None:
        """The call it was running is answered interrupted (not retried); the next call
        starts the server again (its second start)."""
        ref = memory_session()
        model = Offered(calls([("die", {}), ("starts", {})]), done(), reply("ok"))
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path)], session=ref)
        await run_autonomous(build, "die", max_turns=1)
        died, starts = model.results()[:2]
        assert died.startswith("interrupted: the MCP server toolbox went away during the call")
        assert "2" == starts
        assert ["interrupted", "ok"] == (await outcomes(ref))[:2]

    async def test_a_server_that_will_not_start_again_is_tried_once_per_call(
        self, tmp_path: Path
    ) -> None:
        """After the server died, each later call tries one restart; when that fails the
        call is answered with an error naming the server, and the run goes on."""
        model = Offered(
            calls([("die", {}), ("echo", {"text": "a"}), ("echo", {"text": "b"})]), done()
        )
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path, once=True)])
        result = await run_autonomous(build, "die", max_turns=1)
        died, first, second = model.results()[:3]
        assert died.startswith("interrupted")
        for answer in (first, second):
            assert answer.startswith("error: ServerDown: the MCP server toolbox is not running")
        assert StopReason.COMPLETED == result.reason

    async def test_a_stop_during_a_call_ends_the_run_and_closes_the_server(
        self, tmp_path: Path
    ) -> None:
        """Stopping the run while a call blocks cancels the call and closes the session
        cleanly: the run ends context_cancelled, its call answered interrupted."""
        ref = memory_session()
        model = Offered(call("block"), done(), reply("ok"))
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path)], session=ref)
        async with start_autonomous(build, "wait", max_turns=1) as handle:
            await handle.ready()
            await wait_until(lambda: bool(model.tools))
            await anyio.sleep(0.2)  # the call is on its way to the server
            await handle.stop()
            result = await handle.wait()
        assert StopReason.CONTEXT_CANCELLED == result.reason
        assert ["interrupted"] == await outcomes(ref)

    async def test_a_list_change_is_seen_by_the_next_model_call(self, tmp_path: Path) -> None:
        """The server adds a tool during a call; the very next model call is offered it."""
        model = Offered(call("add_tool"), call("extra", {"x": 21}), done(), reply("ok"))
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path)])
        await run_autonomous(build, "grow", max_turns=1)
        assert "extra" not in model.tools[0]
        assert "extra" in model.tools[1]
        assert "42" == model.results()[1]

    async def test_a_name_taken_by_a_local_tool_is_prefixed_with_the_server(
        self, tmp_path: Path
    ) -> None:
        """A server tool named like one of the agent's is offered as server__tool."""

        async def echo(text: str) -> str:
            """The agent's own echo."""
            return f"local {text}"

        model = Offered(calls([("echo", {"text": "a"}), ("box__echo", {"text": "b"})]), done())
        build = agent(
            ScriptedModel(default=model), [toolbox(tmp_path, name="box")], [function_tool(echo)]
        )
        await run_autonomous(build, "both", max_turns=1)
        assert ["local a", "b"] == model.results()[:2]


class TestGate:
    async def test_plan_mode_runs_read_only_tools_and_denies_the_others(
        self, tmp_path: Path
    ) -> None:
        """readOnlyHint makes echo read-only: PLAN runs it and denies write_note."""
        model = Offered(
            calls([("echo", {"text": "look"}), ("write_note", {"text": "x"})]), done(), reply("ok")
        )
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path)])
        await run_autonomous(build, "plan", max_turns=1, permissions_gate=Gate(Mode.PLAN))
        looked, wrote = model.results()[:2]
        assert ("look", True) == (looked, wrote.startswith("denied"))

    async def test_the_prompter_is_told_a_tool_is_destructive(self, tmp_path: Path) -> None:
        """destructiveHint reaches the permission request (and the terminal's question)."""
        asked = []

        async def prompter(request: object) -> bool:
            asked.append(request)
            return True

        model = Offered(call("write_note", {"text": "x"}), done(), reply("ok"))
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path)])
        gate = Gate(Mode.ASK, prompter)
        await run_autonomous(build, "write", max_turns=1, permissions_gate=gate)
        assert [("write_note", True)] == [(r.tool, r.destructive) for r in asked]  # type: ignore[attr-defined]


class TestStart:
    async def test_a_command_that_does_not_exist_fails_the_start_naming_the_server(self) -> None:
        """No such command: MCPServerError names the server; the model is never called."""
        model = ScriptedModel([reply("never")])
        server = MCPServer.stdio("/nonexistent/disk-server", name="disk")
        with pytest.raises(MCPServerError, match=r"MCP server 'disk'.*could not be started"):
            await run_autonomous(agent(model, [server]), "go", max_turns=1)
        assert 0 == model.requests

    async def test_a_server_that_exits_at_once_fails_the_start(self) -> None:
        """A process that exits before it answers is a start failure too."""
        server = MCPServer.stdio(sys.executable, ["-c", "import sys; sys.exit(3)"], name="quits")
        with pytest.raises(MCPServerError) as caught:
            await run_autonomous(agent(ScriptedModel([reply("x")]), [server]), "go", max_turns=1)
        assert "quits" == caught.value.server

    async def test_a_server_that_never_answers_fails_after_its_connect_timeout(self) -> None:
        """A server that starts but never answers fails the start once its connect_timeout
        has passed on the run's clock (fake time here: no real wait), naming the timeout."""
        clock = FakeClock()
        server = MCPServer.stdio(sys.executable, SILENT, name="silent", connect_timeout=45)
        model = ScriptedModel([reply("never")])
        run = agent(model, [server])
        with pytest.raises(MCPServerError, match=r"did not answer within 45 s \(connect_timeout\)"):
            await failing_while_time_passes(clock, run_autonomous(run, "go", clock=clock))
        assert 45 <= clock.monotonic()  # (and a little more: the server's shutdown, on real time)
        assert 0 == model.requests

    async def test_the_runs_wallclock_budget_bounds_the_connect(self) -> None:
        """With max_wallclock shorter than connect_timeout, the start fails when the budget
        is spent, measured from the run's start, and says that the budget cut it short."""
        clock = FakeClock()
        server = MCPServer.stdio(sys.executable, SILENT, name="silent", connect_timeout=600)
        run = agent(ScriptedModel([reply("never")]), [server])
        with pytest.raises(MCPServerError, match=r"within 20 s \(the run's max_wallclock\)"):
            await failing_while_time_passes(
                clock, run_autonomous(run, "go", clock=clock, max_wallclock=20)
            )
        assert 20 <= clock.monotonic() < 60  # not the connect_timeout's 600

    @pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "30"])
    def test_a_connect_timeout_must_be_positive_seconds(self, bad: object) -> None:
        """connect_timeout is a positive, finite number of seconds, on both kinds."""
        with pytest.raises(ConfigurationError, match="connect_timeout"):
            MCPServer.stdio("python3", connect_timeout=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="connect_timeout"):
            MCPServer.http("http://h/mcp", connect_timeout=bad)  # type: ignore[arg-type]

    def test_the_connect_timeout_is_thirty_seconds_unless_given(self) -> None:
        """Both kinds default to 30 s and keep what they are given."""
        assert (30.0, 30.0, 5.0) == (
            MCPServer.stdio("python3").connect_timeout,
            MCPServer.http("http://h/mcp").connect_timeout,
            MCPServer.http("http://h/mcp", connect_timeout=5).connect_timeout,
        )

    def test_two_servers_of_one_name_are_refused(self, tmp_path: Path) -> None:
        """Each server needs a name of its own (it prefixes clashing tools)."""
        with pytest.raises(ConfigurationError, match="more than one MCP server named toolbox"):
            Agent(ScriptedModel(), mcp_servers=[toolbox(tmp_path), toolbox(tmp_path)])


class TestEdges:
    async def test_server_stderr_goes_to_the_debug_log_not_the_terminal(
        self, tmp_path: Path, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """What the server writes on stderr is a debug event of the library's log."""
        model = Offered(call("echo", {"text": "hi"}), done(), reply("ok"))
        with structlog.testing.capture_logs() as logs:
            await run_autonomous(
                agent(ScriptedModel(default=model), [toolbox(tmp_path)]), "echo", max_turns=1
            )
            await wait_until(lambda: any(e["event"] == "mcp_server_stderr" for e in logs))
        lines = [e for e in logs if e["event"] == "mcp_server_stderr"]
        assert ("debug", "toolbox", "echo called with 2 characters") == (
            lines[0]["log_level"],
            lines[0]["server"],
            lines[0]["line"],
        )
        out, err = capfd.readouterr()
        assert "echo called" not in out + err

    async def test_a_traced_call_carries_the_trace_context_in_meta(self, tmp_path: Path) -> None:
        """The request's _meta has the traceparent of the run's tool span."""
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        model = Offered(call("meta"), done(), reply("ok"))
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path)])
        telemetry = Telemetry.create(tracer_provider=provider)
        await run_autonomous(build, "trace", max_turns=1, telemetry=telemetry)
        meta = json.loads(model.results()[0])
        trace_ids = {f"{s.context.trace_id:032x}" for s in exporter.get_finished_spans()}
        assert meta["traceparent"].split("-")[1] in trace_ids

    async def test_on_resume_a_cut_short_call_is_interrupted_and_an_idempotent_one_rerun(
        self, tmp_path: Path
    ) -> None:
        """A crash during write_note: answered interrupted, not sent again; starts
        (idempotentHint) is called again."""
        ref = memory_session()
        await run_autonomous(
            agent(ScriptedModel([reply("one")]), [], session=ref), "watch", max_turns=1
        )
        cut = (
            ToolCallRecord("c1", "write_note", '{"text": "x"}'),
            ToolCallRecord("c2", "starts", "{}"),
        )
        await ref.log.append(
            [
                Event.create(ref.key, Budgets(max_turns=50), author="operator"),
                Event.create(ref.key, UserMessage("continue", 2)),
                Event.create(ref.key, AssistantMessage("", 2, cut, input_tokens=7)),
            ]
        )
        model = Offered(done(), reply("bye"))
        build = agent(ScriptedModel(default=model), [toolbox(tmp_path)], session=ref)
        await resume_autonomous(build, ref)
        answers = {m["tool_call_id"]: m["content"] for m in model.sent[0] if m["role"] == "tool"}
        assert answers["c1"].startswith("interrupted") and "1" == answers["c2"]


def test_without_the_sdk_the_import_error_names_the_extra() -> None:
    """autonomous.mcp without the mcp package: one ImportError saying what to install."""
    code = "import sys; sys.modules['mcp'] = None; import autonomous.mcp"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "pip install 'bounded-autonomous[mcp]'" in done.stderr.splitlines()[-1]
