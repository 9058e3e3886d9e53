"""The bounded tool loop end to end: closed outcome set, tool dispatch and timeouts, result
truncation, steering and skills, and the supervisor, each through a real run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from autonomous import (
    Agent,
    AutonomousStatus,
    ModelResponse,
    RetryDecision,
    StopReason,
    Tool,
    ToolTimeoutError,
    function_tool,
    resume_autonomous,
    run_autonomous,
    start_autonomous,
)
from autonomous._observe._judge import LLMJudge
from autonomous._observe._supervisor import (
    AbortRun,
    PauseRun,
    RulesSupervisor,
    Steer,
    SupervisorSnapshot,
    steer_message,
)
from autonomous._state._history import INTERRUPTED
from autonomous.testing import FakeClock, ScriptedModel, call, calls, done, reply, server
from autonomous.testing._server import ScriptedServer
from eventlog import Checkpoint, Control, EventKind, SessionRef

from ..support.litellm_http import API_KEY, MODEL
from .helpers import BOOM, TICK, builder, memory_session
from .stores import DurableStore

pytestmark = pytest.mark.anyio

OUTCOMES = ("resolved", "escalate")


class Recorder:
    """A model step that answers ``answer`` and keeps a copy of the messages it was sent."""

    def __init__(self, answer: ModelResponse, seen: list[list[dict[str, Any]]]) -> None:
        self.answer = answer
        self.seen = seen

    def __call__(self, messages: Sequence[Any], tools: Sequence[Any]) -> ModelResponse:
        self.seen.append([dict(m) for m in messages])
        return self.answer


def recorded(answers: Sequence[ModelResponse]) -> tuple[ScriptedModel, list[list[dict[str, Any]]]]:
    """A scripted model that records the messages of every call, and that record."""
    seen: list[list[dict[str, Any]]] = []
    return ScriptedModel([Recorder(a, seen) for a in answers]), seen


def last_user(messages: list[dict[str, Any]]) -> str:
    """The newest user message's text."""
    return str([m["content"] for m in messages if m["role"] == "user"][-1])


def tool_contents(messages: Sequence[Any]) -> list[str]:
    """The text of every tool result the model was sent, in order."""
    return [m["content"] for m in messages if m["role"] == "tool"]


def done_tool_spec(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The parameters schema of the done tool among ``tools``."""
    spec = next(t for t in tools if t["function"]["name"] == "report_done")
    return dict(spec["function"]["parameters"])


# --------------------------------------------------------------------------- outcome set


class TestOutcomeSet:
    async def test_the_done_tool_schema_carries_the_closed_set(self) -> None:
        """With outcomes declared, the done tool's outcome is a required JSON-schema enum."""
        model = ScriptedModel([done(outcome="resolved"), reply("ok")])
        await run_autonomous(builder(model), "triage", outcomes=OUTCOMES)
        params = done_tool_spec(model.last_tools)
        assert ["resolved", "escalate"] == params["properties"]["outcome"]["enum"]
        assert ["state", "outcome"] == params["required"]

    async def test_an_outcome_outside_the_set_is_rejected_and_the_run_goes_on(self) -> None:
        """An unknown outcome is answered 'rejected: ...'; a valid one then ends the run."""
        model = ScriptedModel(
            [
                done("guessing", outcome="maybe"),
                done("fixed", outcome="resolved", result={"ticket": 7}),
                reply("closed"),
            ]
        )
        result = await run_autonomous(builder(model), "triage", outcomes=OUTCOMES)
        answers = tool_contents(model.last_messages)
        assert "rejected: outcome must be one of resolved, escalate; got 'maybe'" == answers[0]
        assert answers[1].startswith("acknowledged")
        assert (StopReason.COMPLETED, "resolved", {"ticket": 7}, "fixed") == (
            result.reason,
            result.outcome,
            result.result,
            result.done_detail,
        )

    async def test_a_missing_outcome_is_rejected_when_a_set_is_declared(self) -> None:
        """The done tool without an outcome is rejected; the run is not completed by it."""
        model = ScriptedModel([done("no outcome"), reply("hm")])
        result = await run_autonomous(builder(model), "triage", outcomes=OUTCOMES, max_turns=1)
        assert (
            "rejected: outcome must be one of resolved, escalate; got None"
            == (tool_contents(model.last_messages)[0])
        )
        assert (StopReason.MAX_TURNS_EXCEEDED, None) == (result.reason, result.outcome)

    async def test_the_result_is_type_checked_against_result_schema(self) -> None:
        """A result of the wrong JSON type is rejected; the right one is kept as given."""
        schema = {"type": "object", "properties": {"ticket": {"type": "integer"}}}
        model = ScriptedModel(
            [
                done(outcome="escalate", result="ticket 7"),
                done(outcome="escalate", result={"ticket": 7}),
                reply("handed over"),
            ]
        )
        result = await run_autonomous(
            builder(model), "triage", outcomes=OUTCOMES, result_schema=schema
        )
        assert (
            "rejected: result must be of JSON type object"
            == (tool_contents(model.last_messages)[0])
        )
        assert schema == done_tool_spec(model.last_tools)["properties"]["result"]
        assert ("escalate", {"ticket": 7}) == (result.outcome, result.result)

    async def test_outcome_arguments_are_rejected_without_a_declared_set(self) -> None:
        """With no outcome set, the done tool has no outcome and refuses one."""
        model = ScriptedModel([done(outcome="resolved"), done("plain"), reply("ok")])
        result = await run_autonomous(builder(model), "go")
        assert "outcome" not in done_tool_spec(model.last_tools)["properties"]
        assert tool_contents(model.last_messages)[0].startswith("rejected: this run declares no")
        assert (StopReason.COMPLETED, None) == (result.reason, result.outcome)

    async def test_outcome_set_over_http(self, scripted_server: ScriptedServer) -> None:
        """Through litellm: the enum reaches the server, a bad outcome is rejected, a good one
        ends the run."""
        scripted_server.push(
            server.call("report_done", {"state": "done", "outcome": "shrug"}),
            server.call("report_done", {"state": "done", "outcome": "escalate", "result": "P1"}),
            server.reply("escalated"),
        )

        def build(extra: list[Tool]) -> Agent:
            return Agent(MODEL, tools=extra, api_base=scripted_server.api_base, api_key=API_KEY)

        result = await run_autonomous(build, "triage", outcomes=OUTCOMES, max_turns=3)
        params = done_tool_spec(scripted_server.requests[0]["tools"])
        assert ["resolved", "escalate"] == params["properties"]["outcome"]["enum"]
        sent = scripted_server.requests[1]["messages"][-1]
        assert (
            "rejected: outcome must be one of resolved, escalate; got 'shrug'" == (sent["content"])
        )
        assert (StopReason.COMPLETED, "escalate", "P1", "escalated") == (
            result.reason,
            result.outcome,
            result.result,
            result.final_text,
        )


class TestOutcomeResume:
    async def test_outcome_and_result_survive_a_resume(self, durable: DurableStore) -> None:
        """Resuming a completed durable session returns its outcome and result without building."""
        async with durable.open() as log:
            ref = SessionRef(log, "triage", "ops", "t-1")
            model = ScriptedModel(
                [done("fixed", outcome="resolved", result={"ticket": 7}), reply("closed")]
            )
            first = await run_autonomous(builder(model, session=ref), "triage", outcomes=OUTCOMES)
        built: list[str] = []

        def rebuild(extra: list[Tool], session_id: str) -> Agent:
            built.append(session_id)
            raise AssertionError("a completed session is not built again")

        async with durable.open() as log:
            again = await resume_autonomous(
                rebuild, SessionRef(log, "triage", "ops", "t-1"), outcomes=OUTCOMES
            )
            cp = await log.latest_checkpoint(ref.key)
        assert [] == built
        assert cp is not None and isinstance(cp.payload, Checkpoint)
        assert ("completed", "resolved", {"ticket": 7}) == (
            cp.payload.stop_reason,
            cp.payload.outcome,
            cp.payload.result,
        )
        assert (StopReason.COMPLETED, "resolved", {"ticket": 7}, "fixed", "closed") == (
            again.reason,
            again.outcome,
            again.result,
            again.done_detail,
            again.final_text,
        )
        assert (first.turns, first.input_tokens) == (again.turns, again.input_tokens)

    async def test_a_resumed_run_ends_with_the_outcome_it_chooses(
        self, durable: DurableStore
    ) -> None:
        """A run stopped by its turn cap and resumed later completes with the declared set."""
        async with durable.open() as log:
            ref = SessionRef(log, "triage", "ops", "t-2")
            first = await run_autonomous(
                builder(ScriptedModel([reply("looking")]), session=ref),
                "triage",
                outcomes=OUTCOMES,
                max_turns=1,
            )
            model = ScriptedModel([done("needs a human", outcome="escalate"), reply("bye")])

            def rebuild(extra: list[Tool], session_id: str) -> Agent:
                return builder(model, session=SessionRef(log, "triage", "ops", session_id))(extra)

            again = await resume_autonomous(rebuild, ref, outcomes=OUTCOMES, max_turns=5)
        assert (StopReason.MAX_TURNS_EXCEEDED, None) == (first.reason, first.outcome)
        assert (StopReason.COMPLETED, "escalate", None, 2) == (
            again.reason,
            again.outcome,
            again.result,
            again.turns,
        )
        params = done_tool_spec(model.last_tools)
        assert ["resolved", "escalate"] == params["properties"]["outcome"]["enum"]


# --------------------------------------------------------------------------- tools


class TestToolDispatch:
    async def test_tools_run_one_after_another_in_the_order_asked(self) -> None:
        """Each tool call finishes before the next one starts, in the model's order."""
        order: list[str] = []

        async def step(name: str) -> str:
            """Record a start and an end around a suspension."""
            order.append(f"{name}>")
            await anyio.lowlevel.checkpoint()
            order.append(f"<{name}")
            return name

        tool = function_tool(step)
        model = ScriptedModel([calls([("step", {"name": n}) for n in "abc"]), done(), reply("ok")])
        await run_autonomous(builder(model, tools=[tool]), "go")
        assert ["a>", "<a", "b>", "<b", "c>", "<c"] == order
        assert ["a", "b", "c"] == tool_contents(model.last_messages)[:3]

    async def test_stop_during_the_first_tool_call_skips_the_second(self) -> None:
        """A stop while the first of two tool calls runs cancels it; the second never runs."""
        entered, ran = anyio.Event(), []

        async def first() -> str:
            """Hang until cancelled."""
            entered.set()
            await anyio.sleep_forever()
            return "never"

        async def second() -> str:
            """Record that it ran."""
            ran.append("second")
            return "ran"

        tools = [function_tool(first), function_tool(second)]
        model = ScriptedModel([calls([("first", {}), ("second", {})])], default=reply("x"))
        async with start_autonomous(builder(model, tools=tools), "go") as h:
            await entered.wait()
            await h.stop()
            result = await h.wait()
        assert (StopReason.CONTEXT_CANCELLED, []) == (result.reason, ran)
        assert 1 == model.requests

    async def test_stop_as_the_first_tool_call_returns_skips_the_second(self) -> None:
        """A stop requested while the first tool is about to return is honoured before the
        second tool starts."""
        entered, release, ran = anyio.Event(), anyio.Event(), []

        async def first() -> str:
            """Wait for the test to release it."""
            entered.set()
            await release.wait()
            return "first"

        async def second() -> str:
            """Record that it ran."""
            ran.append("second")
            return "ran"

        tools = [function_tool(first), function_tool(second)]
        model = ScriptedModel([calls([("first", {}), ("second", {})])], default=reply("x"))
        async with start_autonomous(builder(model, tools=tools), "go") as h:
            await entered.wait()
            release.set()  # the first tool can now finish: the stop lands as it returns
            await h.stop()
            result = await h.wait()
        assert StopReason.CONTEXT_CANCELLED == result.reason
        assert [] == ran


class OnTheClock:
    """Tools that take their time on a fake clock and say when they begin: a test waits for
    a tool to begin (its timeout is running), then advances the clock, and no real time
    passes. A tool that hangs waits for nothing that ever comes; one that naps sleeps on the
    clock. The timeouts are longer than the tests' hang guard: one on real time fails them."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self._begun = anyio.Semaphore(0)

    async def begun(self) -> None:
        """Wait until one more tool (or model call) has begun to wait."""
        await self._begun.acquire()

    async def advance(self, *steps: float) -> None:
        """Move the clock on by each of ``steps`` in turn, letting the run act on each (a
        deadline passed, a nap over) before the next: time passes through every instant, so
        a deadline that falls before a wake-up fires before it, as on a real clock."""
        for seconds in steps:
            self.clock.advance(seconds)
            await anyio.wait_all_tasks_blocked()

    async def take(self, seconds: float) -> None:
        """Say that a wait begins, then sleep ``seconds`` on the clock."""
        self._begun.release()
        await self.clock.sleep_until(self.clock.now() + timedelta(seconds=seconds))

    async def hang(self) -> str:
        """Wait forever."""
        self._begun.release()
        await anyio.sleep_forever()
        return "never"

    async def hang_in_own_scope(self) -> str:
        """Wait forever inside a cancel scope of its own."""
        self._begun.release()
        with anyio.CancelScope():
            await anyio.sleep_forever()
        return "never"

    async def nap(self) -> str:
        """Sleep twenty seconds."""
        await self.take(20)
        return "rested"


async def in_own_scope() -> str:
    """Suspend inside a cancel scope of its own, as httpx and most async clients do."""
    with anyio.fail_after(5):
        await anyio.lowlevel.checkpoint()
    return "scope ok"


async def in_task_group() -> str:
    """Suspend inside a task group of its own."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.lowlevel.checkpoint)
    return "group ok"


async def under_a_lock() -> str:
    """Take an uncontended lock (anyio.Lock enters a shielded scope as it acquires)."""
    async with anyio.Lock():
        return "lock ok"


class TestToolsWithTheirOwnScopes:
    @pytest.mark.parametrize(
        ("tool", "expected"),
        [(in_own_scope, "scope ok"), (in_task_group, "group ok"), (under_a_lock, "lock ok")],
    )
    async def test_a_tool_may_open_cancel_scopes(
        self, tool: Callable[[], Awaitable[str]], expected: str
    ) -> None:
        """A tool that suspends inside its own cancel scope, task group or lock returns normally."""
        model = ScriptedModel([call(tool.__name__), done(), reply("ok")])
        result = await run_autonomous(builder(model, tools=[function_tool(tool)]), "go")
        assert (StopReason.COMPLETED, expected) == (
            result.reason,
            tool_contents(model.last_messages)[0],
        )

    async def test_tool_timeout_reaches_a_tool_inside_its_own_scope(self) -> None:
        """tool_timeout still cancels a tool hung inside a cancel scope of its own."""
        slow = OnTheClock()
        model = ScriptedModel([call("hang_in_own_scope"), done(), reply("ok")])
        tools = [function_tool(slow.hang_in_own_scope)]
        with anyio.fail_after(5):
            async with start_autonomous(
                builder(model, tools=tools), "go", tool_timeout=30, clock=slow.clock
            ) as h:
                await slow.begun()
                await slow.advance(30)
                result = await h.wait()
        assert (
            "error: tool hang_in_own_scope timed out after 30 s"
            == (tool_contents(model.last_messages)[0])
        )
        assert StopReason.COMPLETED == result.reason


class TestToolTimeouts:
    """Every tool timeout runs on the run's clock: the tests advance a FakeClock past it."""

    async def test_tool_timeout_cancels_a_hung_tool_and_tells_the_model(self) -> None:
        """A hung tool is cancelled at tool_timeout; the model gets a timeout error; the run
        goes on."""
        outcomes: list[str] = []
        slow = OnTheClock()
        model = ScriptedModel([call("hang"), done(), reply("ok")])
        with anyio.fail_after(5):
            async with start_autonomous(
                builder(model, tools=[function_tool(slow.hang)]),
                "go",
                tool_timeout=30,
                clock=slow.clock,
                progress=lambda turn, ev: outcomes.append(getattr(ev, "outcome", "")),
            ) as h:
                await slow.begun()
                await slow.advance(30)
                result = await h.wait()
        assert "error: tool hang timed out after 30 s" == tool_contents(model.last_messages)[0]
        assert "timeout" in outcomes
        assert StopReason.COMPLETED == result.reason

    async def test_a_tools_own_timeout_overrides_the_runs(self) -> None:
        """Tool(timeout=...) beats tool_timeout both ways: shorter and longer."""
        slow = OnTheClock()
        short = function_tool(slow.hang, timeout=30)
        long = function_tool(slow.nap, timeout=60)
        model = ScriptedModel([calls([("hang", {}), ("nap", {})]), done(), reply("ok")])
        with anyio.fail_after(5):
            async with start_autonomous(
                builder(model, tools=[short, long]), "go", tool_timeout=10, clock=slow.clock
            ) as h:
                await slow.begun()
                await slow.advance(30)  # past the run's 10 s: the hung tool times out
                await slow.begun()
                await slow.advance(10, 10)  # through the run's 10 s: the nap is over
                result = await h.wait()
        assert [
            "error: tool hang timed out after 30 s",
            "rested",
        ] == tool_contents(model.last_messages)[:2]
        assert StopReason.COMPLETED == result.reason

    async def test_fatal_timeout_ends_the_turn_for_the_retry_policy(self) -> None:
        """A fatal_timeout tool that times out fails the turn with ToolTimeoutError."""
        seen: list[tuple[str, int]] = []

        def policy(error: BaseException, attempt: int) -> RetryDecision:
            seen.append((type(error).__name__, attempt))
            return RetryDecision.ABORT_RUN

        slow = OnTheClock()
        tool = function_tool(slow.hang, timeout=30, fatal_timeout=True)
        model = ScriptedModel([call("hang")], default=reply("x"))
        with anyio.fail_after(5):
            async with start_autonomous(
                builder(model, tools=[tool]), "go", retry_policy=policy, clock=slow.clock
            ) as h:
                await slow.begun()
                await slow.advance(30)
                result = await h.wait()
        assert [("ToolTimeoutError", 1)] == seen
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        assert isinstance(result.error, ToolTimeoutError)
        assert "tool hang timed out after 30 s" == str(result.error)

    async def test_a_fatal_timeout_retried_turn_keeps_the_call_answered_as_interrupted(
        self,
    ) -> None:
        """After a fatal tool timeout, RETRY_TURN goes on with the same turn: the timed-out
        call stays in view, answered as interrupted (it may have taken effect)."""
        slow = OnTheClock()
        tool = function_tool(slow.hang, timeout=30, fatal_timeout=True)
        model, seen = recorded([call("hang"), done(), reply("ok")])
        with anyio.fail_after(5):
            async with start_autonomous(
                builder(model, tools=[tool]),
                "the goal",
                retry_policy=lambda error, attempt: RetryDecision.RETRY_TURN,
                clock=slow.clock,
            ) as h:
                await slow.begun()
                await slow.advance(30)
                result = await h.wait()
        assert StopReason.COMPLETED == result.reason
        assert "the goal" == last_user(seen[1])
        assert [INTERRUPTED] == tool_contents(seen[1])

    async def test_a_finished_tools_timeout_never_reaches_the_next_model_call(self) -> None:
        """A quick tool's timeout ends with it: a model call slower than that timeout runs on."""
        slow = OnTheClock()

        async def quick() -> str:
            """Return at once."""
            return "quick"

        async def slow_answer(messages: object, tools: object) -> ModelResponse:
            await slow.take(60)  # well past the tool's deadline, had it outlived the tool
            return done()

        model = ScriptedModel([call("quick"), slow_answer, reply("ok")])
        tool = function_tool(quick, timeout=30)
        with anyio.fail_after(5):
            async with start_autonomous(builder(model, tools=[tool]), "go", clock=slow.clock) as h:
                await slow.begun()
                await slow.advance(30, 30)  # through the tool's deadline: the answer comes
                result = await h.wait()
        assert "quick" == tool_contents(model.last_messages)[0]
        assert StopReason.COMPLETED == result.reason

    async def test_a_shorter_timeout_after_a_longer_one_still_fires_on_time(self) -> None:
        """A tool with a long timeout, then a hung one with a short timeout: the short one wins."""
        slow = OnTheClock()
        model = ScriptedModel([calls([("nap", {}), ("hang", {})]), done(), reply("ok")])
        tools = [function_tool(slow.nap, timeout=60), function_tool(slow.hang, timeout=30)]
        with anyio.fail_after(5):
            async with start_autonomous(builder(model, tools=tools), "go", clock=slow.clock) as h:
                await slow.begun()
                await slow.advance(20)  # the nap is over
                await slow.begun()
                await slow.advance(30)  # the hung tool's timeout, far short of the nap's 60 s
                result = await h.wait()
        assert ["rested", "error: tool hang timed out after 30 s"] == tool_contents(
            model.last_messages
        )[:2]
        assert StopReason.COMPLETED == result.reason

    async def test_a_longer_timeout_after_a_shorter_one_is_not_cut_short(self) -> None:
        """A tool that runs past the previous tool's deadline, inside its own, finishes."""
        slow = OnTheClock()

        async def quick() -> str:
            """Return at once."""
            return "quick"

        async def past_the_first_deadline() -> str:
            """Sleep well past the first tool's timeout."""
            await slow.take(60)
            return "rested"

        tools = [
            function_tool(quick, timeout=30),
            function_tool(past_the_first_deadline, timeout=600),
        ]
        model = ScriptedModel(
            [calls([("quick", {}), ("past_the_first_deadline", {})]), done(), reply("ok")]
        )
        with anyio.fail_after(5):
            async with start_autonomous(builder(model, tools=tools), "go", clock=slow.clock) as h:
                await slow.begun()
                await slow.advance(30, 30)  # through the first tool's deadline: the nap is over
                result = await h.wait()
        assert ["quick", "rested"] == tool_contents(model.last_messages)[:2]
        assert StopReason.COMPLETED == result.reason

    async def test_each_timed_out_tool_of_a_turn_gets_its_own_deadline(self) -> None:
        """Two hung tools in one turn both time out, each after its own timeout."""
        slow = OnTheClock()
        model = ScriptedModel([calls([("hang", {}), ("hang", {})]), done(), reply("ok")])
        with anyio.fail_after(5):
            async with start_autonomous(
                builder(model, tools=[function_tool(slow.hang)]),
                "go",
                tool_timeout=30,
                clock=slow.clock,
            ) as h:
                for _ in range(2):
                    await slow.begun()
                    await slow.advance(30)
                result = await h.wait()
        assert ["error: tool hang timed out after 30 s"] * 2 == tool_contents(model.last_messages)[
            :2
        ]
        assert StopReason.COMPLETED == result.reason


class TestToolResultTruncation:
    async def test_a_long_result_is_cut_with_a_visible_marker(self) -> None:
        """A result past max_tool_result_chars is cut there and says how much was dropped."""

        async def dump() -> str:
            """Return fifty x."""
            return "x" * 50

        model = ScriptedModel([call("dump"), done(), reply("ok")])
        await run_autonomous(
            builder(model, tools=[function_tool(dump)]), "go", max_tool_result_chars=10
        )
        assert (
            "xxxxxxxxxx\n…[truncated: 40 more characters]"
            == (tool_contents(model.last_messages)[0])
        )

    async def test_an_error_result_is_cut_at_the_same_limit(self) -> None:
        """A tool's error text is a result too: it is cut at max_tool_result_chars."""

        def noisy() -> str:
            """Fail with a long message."""
            raise RuntimeError("z" * 500)

        model = ScriptedModel([call("noisy"), done(), reply("ok")])
        await run_autonomous(
            builder(model, tools=[function_tool(noisy, sync_in_thread=False)]),
            "go",
            max_tool_result_chars=100,
        )
        text = "error: RuntimeError: " + "z" * 500
        assert (
            f"{text[:100]}\n…[truncated: {len(text) - 100} more characters]"
            == (tool_contents(model.last_messages)[0])
        )

    async def test_the_default_limit_is_8000_characters(self) -> None:
        """Without the option, results are cut at 8000 characters."""

        async def dump() -> str:
            """Return 8100 characters."""
            return "y" * 8100

        model = ScriptedModel([call("dump"), done(), reply("ok")])
        await run_autonomous(builder(model, tools=[function_tool(dump)]), "go")
        assert (
            "y" * 8000 + "\n…[truncated: 100 more characters]"
            == (tool_contents(model.last_messages)[0])
        )


# --------------------------------------------------------------------------- steering


STEERING_TITLE = "# Steering (persistent operating context — always follow it)"
SKILLS_TITLE = "# Skills (apply the following skills/instructions when relevant)"


def steered_agent_dir(tmp_path: Path) -> Path:
    """An agent directory with one steering file and one skill file, and a file outside it."""
    home = tmp_path / "agent"
    home.mkdir()
    (home / "ops.md").write_text("Never restart prod on Fridays.\n", encoding="utf-8")
    (home / "disk.md").write_text("Read df -h before du.\n", encoding="utf-8")
    (tmp_path / "secret.md").write_text("OUTSIDE-SECRET\n", encoding="utf-8")
    return home


class TestSteering:
    async def test_steering_and_skills_reach_the_system_message_framed(
        self, tmp_path: Path
    ) -> None:
        """Steering is framed 'always follow', skills 'apply when relevant', in that order."""
        home = steered_agent_dir(tmp_path)
        model = ScriptedModel([done(), reply("ok")])

        def build(extra: list[Tool]) -> Agent:
            return Agent(
                model,
                instructions="You watch disks.",
                tools=extra,
                steering="Be brief.",
                steering_files=["ops.md"],
                skills=["Prefer metric units."],
                skill_files=["disk.md"],
                base_dir=home,
            )

        await run_autonomous(build, "go")
        assert {
            "role": "system",
            "content": (
                "You watch disks.\n\n"
                f"{STEERING_TITLE}\n\nBe brief.\n\n## ops.md\nNever restart prod on Fridays."
                f"\n\n{SKILLS_TITLE}\n\n## Skill 1\nPrefer metric units.\n\n"
                "## disk.md\nRead df -h before du."
            ),
        } == model.last_messages[0]

    async def test_a_file_outside_the_agents_directory_is_refused(self, tmp_path: Path) -> None:
        """A steering file that resolves outside base_dir is skipped with a warning; the run goes
        on without its text."""
        home = steered_agent_dir(tmp_path)
        model = ScriptedModel([done(), reply("ok")])

        def build(extra: list[Tool]) -> Agent:
            return Agent(
                model,
                tools=extra,
                steering_files=["../secret.md", str(tmp_path / "secret.md"), "ops.md"],
                skill_files=["missing.md"],
                base_dir=home,
            )

        with structlog.testing.capture_logs() as logs:
            result = await run_autonomous(build, "go")
        assert StopReason.COMPLETED == result.reason
        system = model.last_messages[0]["content"]
        assert "OUTSIDE-SECRET" not in system and "Never restart prod" in system
        skipped = [
            (e["path"], e["reason"].split(" ")[0])
            for e in logs
            if e["event"] == "steering_file_skipped"
        ]
        assert [
            ("../secret.md", "outside"),
            (str(tmp_path / "secret.md"), "outside"),
            ("missing.md", "does"),
        ] == skipped

    async def test_steering_reaches_the_server_over_http(
        self, tmp_path: Path, scripted_server: ScriptedServer
    ) -> None:
        """Through litellm, the framed steering is the first message the server receives."""
        home = steered_agent_dir(tmp_path)
        scripted_server.push(server.call("report_done", {"state": "done"}), server.reply("ok"))

        def build(extra: list[Tool]) -> Agent:
            return Agent(
                MODEL,
                tools=extra,
                steering_files=["ops.md"],
                base_dir=home,
                api_base=scripted_server.api_base,
                api_key=API_KEY,
            )

        await run_autonomous(build, "go", max_turns=2)
        first = scripted_server.requests[0]["messages"][0]
        assert {
            "role": "system",
            "content": f"{STEERING_TITLE}\n\n## ops.md\nNever restart prod on Fridays.",
        } == {k: first[k] for k in ("role", "content")}


# --------------------------------------------------------------------------- supervisor


class TestRulesSupervisorInRuns:
    async def test_aborts_after_consecutive_tool_errors(self) -> None:
        """Two failing tool calls make the rules supervisor abort at the next turn boundary."""
        model = ScriptedModel(
            [calls([("boom", {"reason": "a"}), ("boom", {"reason": "b"})]), reply("hm")],
            default=reply("never"),
        )
        ref = memory_session()
        result = await run_autonomous(
            builder(model, tools=[BOOM], session=ref),
            "go",
            supervisor=RulesSupervisor(max_consecutive_tool_errors=2),
        )
        assert (StopReason.ABORTED, "2 consecutive tool errors", 1) == (
            result.reason,
            result.abort_reason,
            result.turns,
        )
        assert 2 == model.requests
        last = await ref.log.latest_checkpoint(ref.key)
        assert last is not None and isinstance(last.payload, Checkpoint)
        assert "aborted" == last.payload.stop_reason

    async def test_a_good_tool_call_resets_the_streak(self) -> None:
        """Errors separated by an ok call do not add up to the limit."""
        model = ScriptedModel(
            [
                calls([("boom", {"reason": "a"}), ("tick", {"n": 1}), ("boom", {"reason": "b"})]),
                reply("one"),
                done(),
                reply("ok"),
            ]
        )
        result = await run_autonomous(
            builder(model, tools=[BOOM, TICK]),
            "go",
            supervisor=RulesSupervisor(max_consecutive_tool_errors=2),
        )
        assert StopReason.COMPLETED == result.reason


class TestSteerInRuns:
    async def test_steer_text_is_framed_as_guidance_and_cleared_after_a_good_turn(self) -> None:
        """Steer text prefixes the next prompt as supervisor guidance, then goes away."""

        def supervisor(snapshot: SupervisorSnapshot) -> Steer | None:
            return Steer("check the disk first") if snapshot.turn == 2 else None

        model, seen = recorded([reply("one"), reply("two"), done(), reply("ok")])
        result = await run_autonomous(builder(model), "the goal", supervisor=supervisor)
        assert StopReason.COMPLETED == result.reason
        assert "the goal" == last_user(seen[0])
        assert f"{steer_message('check the disk first')}\n\ncontinue" == last_user(seen[1])
        assert last_user(seen[1]).startswith("[Supervisor guidance] check the disk first\n")
        assert "continue" == last_user(seen[2])

    async def test_steer_does_not_change_the_tools(self) -> None:
        """The steered turn offers the model the same tools as the other turns."""
        tools_seen: list[list[str]] = []

        def answer(response: ModelResponse) -> Any:
            def step(messages: Sequence[Any], tools: Sequence[dict[str, Any]]) -> ModelResponse:
                tools_seen.append([t["function"]["name"] for t in tools])
                return response

            return step

        model = ScriptedModel([answer(reply("one")), answer(done()), answer(reply("ok"))])
        await run_autonomous(
            builder(model, tools=[TICK]),
            "go",
            supervisor=lambda s: Steer("stop calling tick") if s.turn == 2 else None,
        )
        assert [["tick", "report_done"]] * 3 == tools_seen

    async def test_steer_survives_a_failed_attempt(self) -> None:
        """A turn that fails keeps the guidance for its retry."""

        def supervisor(snapshot: SupervisorSnapshot) -> Steer | None:
            return Steer("slow down") if snapshot.turn == 2 else None

        seen: list[list[dict[str, Any]]] = []
        model = ScriptedModel(
            [
                Recorder(reply("one"), seen),
                RuntimeError("model hiccup"),
                Recorder(done(), seen),
                Recorder(reply("ok"), seen),
            ]
        )
        result = await run_autonomous(
            builder(model),
            "go",
            supervisor=supervisor,
            retry_policy=lambda error, attempt: RetryDecision.RETRY_TURN,
        )
        assert StopReason.COMPLETED == result.reason
        assert last_user(seen[1]).startswith("[Supervisor guidance] slow down")


class TestPauseInRuns:
    async def test_pause_parks_the_run_until_resumed(self) -> None:
        """PauseRun parks the loop (status paused, a pause note in the log); resume goes on."""
        asked: list[int] = []

        def supervisor(snapshot: SupervisorSnapshot) -> PauseRun | None:
            asked.append(snapshot.turn)
            return PauseRun("cost looks odd") if snapshot.turn == 2 else None

        ref = memory_session()
        model = ScriptedModel([reply("one"), done(), reply("ok")])
        async with start_autonomous(builder(model, session=ref), "go", supervisor=supervisor) as h:
            events = h.events()
            async for event in events:
                if type(event).__name__ == "Paused":
                    break
            assert AutonomousStatus.PAUSED == h.status
            assert 1 == model.requests
            await h.resume()
            result = await h.wait()
        assert (StopReason.COMPLETED, 2) == (result.reason, result.turns)
        assert [1, 2] == asked
        notes = [
            (e.author, e.payload.action, e.payload.detail)
            for e in await ref.log.read(ref.key, kinds=[EventKind.CONTROL])
            if isinstance(e.payload, Control)
        ]
        assert [
            ("handle:supervisor", "pause", "cost looks odd"),
            ("handle", "resume", ""),
        ] == notes

    async def test_a_pause_longer_than_pause_max_becomes_an_abort(self) -> None:
        """Nobody resumes within pause_max: the run ends aborted, saying why."""
        clock = FakeClock()
        model = ScriptedModel([reply("one")], default=reply("never"))
        with anyio.fail_after(5):
            async with start_autonomous(
                builder(model),
                "go",
                supervisor=lambda s: PauseRun("wait") if s.turn == 2 else None,
                pause_max=30,
                clock=clock,
            ) as h:
                async for event in h.events():
                    if type(event).__name__ == "Paused":
                        break
                await anyio.wait_all_tasks_blocked()  # parked: pause_max is running
                clock.advance(30)
                result = await h.wait()
        assert (StopReason.ABORTED, "paused longer than pause_max=30 s", 1) == (
            result.reason,
            result.abort_reason,
            result.turns,
        )
        assert 1 == model.requests


class TestSupervisorFailures:
    async def test_a_raising_supervisor_lets_the_run_go_on(self) -> None:
        """A supervisor that raises is logged by type and the run completes."""

        def supervisor(snapshot: SupervisorSnapshot) -> None:
            raise RuntimeError("rules file missing")

        model = ScriptedModel([reply("one"), done(), reply("ok")])
        with structlog.testing.capture_logs() as logs:
            result = await run_autonomous(builder(model), "go", supervisor=supervisor)
        assert StopReason.COMPLETED == result.reason
        failed = [e for e in logs if e["event"] == "supervisor_failed"]
        assert [("RuntimeError", 1), ("RuntimeError", 2)] == [
            (e["error"], e["turn"]) for e in failed
        ]

    async def test_a_hung_supervisor_times_out_and_the_run_goes_on(self) -> None:
        """A supervisor past supervisor_timeout is abandoned; the turn still runs."""
        slow = OnTheClock()

        async def supervisor(snapshot: SupervisorSnapshot) -> AbortRun:
            await slow.hang()
            return AbortRun("never")

        model = ScriptedModel([done(), reply("ok")])
        with structlog.testing.capture_logs() as logs, anyio.fail_after(5):
            async with start_autonomous(
                builder(model),
                "go",
                supervisor=supervisor,
                supervisor_timeout=30,
                clock=slow.clock,
            ) as h:
                await slow.begun()
                await slow.advance(30)
                result = await h.wait()
        assert StopReason.COMPLETED == result.reason
        assert ["supervisor_timeout"] == [
            e["event"] for e in logs if e["event"].startswith("supervisor")
        ]


class TestLLMJudgeInRuns:
    async def test_a_judge_is_asked_every_two_turns_and_can_abort(self) -> None:
        """An LLMJudge on a ScriptedModel is asked before turns 3 and 5; its abort ends the run."""
        judge_model = ScriptedModel(
            [
                reply('{"decision": "continue"}'),
                reply('```json\n{"decision": "abort", "reason": "going in circles"}\n```'),
            ]
        )
        judge = LLMJudge(judge_model, every_n_turns=2)
        model = ScriptedModel(default=reply("working"))
        result = await run_autonomous(builder(model), "go", supervisor=judge, max_turns=10)
        assert (StopReason.ABORTED, "going in circles", 4) == (
            result.reason,
            result.abort_reason,
            result.turns,
        )
        assert (2, 2, 4) == (judge.calls, judge_model.requests, model.requests)
        snapshot_text = judge_model.last_messages[-1]["content"]
        assert snapshot_text.startswith("Run snapshot: ") and '"turn":5' in snapshot_text

    async def test_a_judges_steer_reaches_the_agent(self) -> None:
        """The judge's steer message becomes guidance in the agent's next prompt."""
        judge = LLMJudge(
            ScriptedModel(
                [reply('{"decision": "steer", "message": "try the cache"}')],
                default=reply('{"decision": "continue"}'),
            ),
            every_n_turns=1,
        )
        model, seen = recorded([reply("one"), done(), reply("ok")])
        result = await run_autonomous(builder(model), "go", supervisor=judge)
        assert (StopReason.COMPLETED, 1) == (result.reason, judge.calls)
        assert f"{steer_message('try the cache')}\n\ncontinue" == last_user(seen[1])
