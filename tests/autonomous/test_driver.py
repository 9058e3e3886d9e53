"""The loop of run_autonomous on ScriptedModel: turns, done tool, budgets, retries, inbox, log."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
import pytest

from autonomous import (
    Agent,
    ConfigurationError,
    GateWouldDeadlock,
    ModelCalled,
    ModelCallLimit,
    ModelError,
    ModelResponse,
    RetryDecision,
    StopReason,
    Tool,
    TurnTimeout,
    run_autonomous,
    start_autonomous,
)
from autonomous.testing import FakeClock, ScriptedModel, call, calls, done, reply
from eventlog import Event, EventKind, InboxDelivered, SessionRef
from permissions import Gate, Mode
from usage import Pricing, Tracker

from .helpers import BOOM, TICK, builder, checkpoints, kinds, memory_session, payloads

pytestmark = pytest.mark.anyio


class TestCompletion:
    async def test_done_tool_completes_the_run(self) -> None:
        """The done tool ends the run as completed with its detail and the summed usage."""
        model = ScriptedModel([call("tick", {"n": 1}), done("all good"), reply("summary")])
        result = await run_autonomous(builder(model, tools=[TICK]), "count")
        assert (StopReason.COMPLETED, "all good", 1) == (
            result.reason,
            result.done_detail,
            result.turns,
        )
        assert (30, 15) == (result.input_tokens, result.output_tokens)
        assert "summary" == result.final_text

    async def test_final_text_is_the_last_answer_of_a_non_streaming_model(self) -> None:
        """final_text is the text of the model's last answer, not an empty stream buffer."""
        model = ScriptedModel(
            [
                reply("first turn"),
                call("report_done", {"state": "done"}, text="closing words"),
                reply(""),
            ]
        )
        result = await run_autonomous(builder(model), "go")
        assert "closing words" == result.final_text

    async def test_continuation_prompt_starts_every_later_turn(self) -> None:
        """Turn two is prompted with the continuation prompt."""
        model = ScriptedModel([reply("thinking"), done(), reply("ok")])
        await run_autonomous(builder(model), "goal text", continuation_prompt="next step?")
        users = [m["content"] for m in model.last_messages if m["role"] == "user"]
        assert ["goal text", "next step?"] == users

    async def test_tool_results_follow_the_calls_in_order(self) -> None:
        """Several tool calls of one answer run in the order asked, each answered by id."""
        model = ScriptedModel(
            [calls([("tick", {"n": 1}), ("tick", {"n": 5})], ids=["a", "b"]), done(), reply("x")]
        )
        await run_autonomous(builder(model, tools=[TICK]), "go")
        tool_msgs = [
            (m["tool_call_id"], m["content"]) for m in model.last_messages if m["role"] == "tool"
        ]
        assert [("a", "2"), ("b", "6")] == tool_msgs[:2]

    async def test_no_done_tool_call_runs_until_max_turns(self) -> None:
        """A model that never calls done stops at max_turns."""
        model = ScriptedModel(default=reply("still going"))
        result = await run_autonomous(builder(model), "go", max_turns=3)
        assert (StopReason.MAX_TURNS_EXCEEDED, 3) == (result.reason, result.turns)


class TestToolFailures:
    async def test_a_raising_tool_is_reported_and_the_turn_goes_on(self) -> None:
        """A tool that raises becomes an error result for the model; the run continues."""
        model = ScriptedModel([call("boom", {"reason": "disk gone"}), done(), reply("ok")])
        result = await run_autonomous(builder(model, tools=[BOOM]), "go")
        tool_msg = next(m for m in model.last_messages if m["role"] == "tool")
        assert StopReason.COMPLETED == result.reason
        assert "disk gone" in tool_msg["content"] and tool_msg["content"].startswith("error")

    async def test_unknown_tool_and_bad_arguments_go_back_to_the_model(self) -> None:
        """Calls of unknown tools and malformed arguments are answered, never crash the run."""
        model = ScriptedModel(
            [calls([("nope", {}), ("tick", "{not json"), ("tick", {"m": 1})]), done(), reply("ok")]
        )
        result = await run_autonomous(builder(model, tools=[TICK]), "go")
        contents = [m["content"] for m in model.last_messages if m["role"] == "tool"][:3]
        assert StopReason.COMPLETED == result.reason
        assert "unknown tool 'nope'" in contents[0]
        assert all(c.startswith("error: invalid arguments") for c in contents[1:])

    async def test_model_call_limit_is_a_turn_error(self) -> None:
        """A model that never stops calling tools ends the turn as ModelCallLimit."""
        model = ScriptedModel(default=call("tick", {"n": 1}))
        result = await run_autonomous(
            builder(model, tools=[TICK]), "go", max_model_calls_per_turn=4
        )
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        assert isinstance(result.error, ModelCallLimit) and 4 == model.requests


class TestBudgets:
    async def test_input_token_cap_stops_before_the_next_turn(self) -> None:
        """The input-token cap stops the run before a call that would pass it (the third,
        estimated at the second's 1,000 tokens plus its new messages), not after it."""
        model = ScriptedModel(default=reply("x", input_tokens=1000))
        result = await run_autonomous(builder(model), "go", max_input_tokens=2500)
        assert (StopReason.MAX_TOKENS_EXCEEDED, 2, 2000, 2) == (
            result.reason,
            result.turns,
            result.input_tokens,
            model.requests,
        )

    async def test_budgets_hold_inside_a_turn(self) -> None:
        """No model call starts once the output-token cap is reached, even mid-turn."""
        model = ScriptedModel(default=call("tick", {"n": 1}, output_tokens=50))
        result = await run_autonomous(builder(model, tools=[TICK]), "go", max_output_tokens=120)
        assert (StopReason.MAX_TOKENS_EXCEEDED, 3) == (result.reason, model.requests)

    async def test_cost_cap_uses_pricing_and_feeds_the_tracker(self) -> None:
        """Cost comes from the pricing, is capped, and every call is a tracker row."""
        tracker = Tracker()
        model = ScriptedModel(default=reply("x", input_tokens=1_000_000, output_tokens=0))
        result = await run_autonomous(
            builder(model),
            "go",
            max_cost_usd=2.5,
            pricing=Pricing(input_per_mtok=1.0),
            tracker=tracker,
        )
        # The third call would cost another dollar: past the cap, so it is never made.
        assert (StopReason.MAX_COST_EXCEEDED, 2.0) == (result.reason, result.cost_usd)
        assert 2 == tracker.totals.calls and 2.0 == pytest.approx(tracker.totals.cost_usd)

    async def test_wallclock_cap_on_an_injected_clock(self) -> None:
        """The wall-clock cap trips on the injected clock, with no real waiting."""
        clock = FakeClock()

        def slow(messages: object, tools: object) -> ModelResponse:
            clock.advance(40)
            return reply("x")

        model = ScriptedModel(default=slow)
        result = await run_autonomous(
            builder(model), "go", max_wallclock=timedelta(seconds=100), clock=clock
        )
        assert (StopReason.WALLCLOCK_EXCEEDED, 3) == (result.reason, result.turns)

    async def test_wallclock_is_checked_before_turns(self) -> None:
        """When wall-clock and turns are both spent, wall-clock is the reason."""
        clock = FakeClock()

        def slow(messages: object, tools: object) -> ModelResponse:
            clock.advance(10)
            return reply("x")

        model = ScriptedModel(default=slow)
        result = await run_autonomous(
            builder(model), "go", max_turns=1, max_wallclock=5, clock=clock
        )
        assert StopReason.WALLCLOCK_EXCEEDED == result.reason


class TestRetryPolicy:
    async def test_no_policy_aborts_with_the_error(self) -> None:
        """Without a policy the first turn error aborts; the error is on the result."""
        model = ScriptedModel([RuntimeError("provider down")])
        result = await run_autonomous(builder(model), "go")
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        assert isinstance(result.error, ModelError) and "provider down" in str(result.error)

    async def test_attempt_counts_consecutive_failures_of_one_turn(self) -> None:
        """attempt is 1, 2, ... for one turn's failures and starts again after a success."""
        seen: list[int] = []

        def policy(error: BaseException, attempt: int) -> RetryDecision:
            seen.append(attempt)
            return RetryDecision.RETRY_TURN

        model = ScriptedModel(
            [
                RuntimeError("a"),
                RuntimeError("b"),
                reply("ok"),
                RuntimeError("c"),
                done(),
                reply("x"),
            ]
        )
        result = await run_autonomous(builder(model), "go", retry_policy=policy)
        assert [1, 2, 1] == seen
        assert (StopReason.COMPLETED, 5) == (result.reason, result.turns)

    async def test_retry_goes_on_with_the_turn_and_skip_moves_on(self) -> None:
        """RETRY_TURN goes on with the failed attempt's turn (its prompt sent once); SKIP_TURN
        closes it and goes on with the continuation."""
        decisions = iter([RetryDecision.RETRY_TURN, RetryDecision.SKIP_TURN])
        model = ScriptedModel([RuntimeError("a"), RuntimeError("b"), done(), reply("x")])
        await run_autonomous(builder(model), "the goal", retry_policy=lambda e, a: next(decisions))
        users = [m["content"] for m in model.last_messages if m["role"] == "user"]
        assert ["the goal", "continue"] == users

    async def test_done_is_never_lost_when_the_turn_errors_after_it(self) -> None:
        """A turn that fails after the done tool ran still completes the run."""
        model = ScriptedModel([done("finished"), RuntimeError("late failure")])
        result = await run_autonomous(builder(model), "go")
        assert (StopReason.COMPLETED, "finished") == (result.reason, result.done_detail)

    async def test_per_turn_timeout_is_a_turn_error(self) -> None:
        """A turn outliving per_turn_timeout is a TurnTimeout for the retry policy."""
        clock, asked = FakeClock(), anyio.Event()

        async def hang(messages: object, tools: object) -> ModelResponse:
            asked.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        model = ScriptedModel([hang])
        # 30 s on the run's clock: one on real time would outlast the hang guard.
        with anyio.fail_after(5):
            async with start_autonomous(
                builder(model), "go", per_turn_timeout=30, clock=clock
            ) as h:
                await asked.wait()
                clock.advance(30)
                result = await h.wait()
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        assert isinstance(result.error, TurnTimeout)

    async def test_caller_cancellation_propagates_after_the_final_checkpoint(self) -> None:
        """The caller's own deadline cancels the run, writing a context_cancelled checkpoint."""
        ref = memory_session()

        async def hang(messages: object, tools: object) -> ModelResponse:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        model = ScriptedModel([hang])
        with anyio.move_on_after(0.05) as scope:
            await run_autonomous(builder(model, session=ref), "go", per_turn_timeout=30)
        assert scope.cancelled_caught
        assert "context_cancelled" == (await checkpoints(ref))[-1].stop_reason


class TestInbox:
    async def test_failed_attempts_get_their_inbox_messages_again(self) -> None:
        """Inbox messages drained into a failed attempt are delivered on the retry."""
        ref = memory_session()
        from autonomous import start_autonomous

        model = ScriptedModel([reply("turn one"), RuntimeError("flaky"), done(), reply("x")])
        gate = anyio.Event()

        async def before(turn: int) -> None:
            if turn == 2:
                await gate.wait()

        async with start_autonomous(
            builder(model, session=ref),
            "go",
            before_turn=before,
            retry_policy=lambda e, a: RetryDecision.RETRY_TURN,
        ) as h:
            await h.ready()
            await h.inject("first")
            await h.inject("second")
            gate.set()
            result = await h.wait()
        users = [m["content"] for m in model.last_messages if m["role"] == "user"]
        assert StopReason.COMPLETED == result.reason
        assert "[Inbox]\n- first\n- second\n\ncontinue" == users[-1]
        delivered = await payloads(ref, EventKind.INBOX_DELIVERED, InboxDelivered)
        assert 1 == len(delivered) and 2 == len(delivered[0].message_ids)


class TestEventLog:
    async def test_every_message_and_a_checkpoint_per_turn_are_logged(self) -> None:
        """The log holds the conversation and a checkpoint after every turn and at the exit."""
        ref = memory_session()
        model = ScriptedModel([call("tick", {"n": 1}), reply("a"), done(), reply("b")])
        await run_autonomous(builder(model, tools=[TICK], session=ref), "go")
        assert [
            "user_message",
            "assistant_message",
            "tool_result",
            "assistant_message",
            "checkpoint",
            "user_message",
            "assistant_message",
            "tool_result",
            "assistant_message",
            "checkpoint",
        ] == await kinds(ref.log, ref)
        cps = await checkpoints(ref)
        assert [None, "completed"] == [c.stop_reason for c in cps]
        assert (2, "continue") == (cps[-1].turns, cps[0].next_prompt)

    async def test_a_budget_exit_after_a_turn_writes_one_checkpoint_for_both(self) -> None:
        """The turn that spends the last of a budget is closed by the exit's checkpoint alone
        (one commit less), which holds that turn's totals."""
        ref = memory_session()
        model = ScriptedModel(default=reply("again"))
        result = await run_autonomous(builder(model, session=ref), "go", max_turns=3)
        assert StopReason.MAX_TURNS_EXCEEDED == result.reason
        cps = await checkpoints(ref)
        assert [(1, None), (2, None), (3, "max_turns_exceeded")] == [
            (c.turns, c.stop_reason) for c in cps
        ]
        assert (3, "continue") == (cps[-1].model_calls, cps[-1].next_prompt)

    async def test_the_turns_last_answer_goes_in_with_the_checkpoint(self) -> None:
        """An answer with tool calls is appended before its tools run; the turn's last
        answer goes in with the checkpoint after it: one commit per model call."""
        ref = memory_session()
        batches = _record_batches(ref)
        model = ScriptedModel([call("tick", {"n": 1}), reply("a"), reply("b")])
        await run_autonomous(builder(model, tools=[TICK], session=ref), "go", max_turns=2)
        assert [
            ["user_message", "assistant_message"],
            ["tool_result", "assistant_message", "checkpoint"],
            ["user_message", "assistant_message", "checkpoint"],
        ] == batches

    async def test_with_a_progress_reader_the_answer_is_logged_before_it_is_reported(
        self,
    ) -> None:
        """A progress callback hears of the turn's last answer only once it is in the log:
        with the checkpoint after it, one commit whoever listens."""
        ref = memory_session()
        logged: list[list[str]] = []

        async def progress(turn: int, event: object) -> None:
            if isinstance(event, ModelCalled):
                logged.append(await kinds(ref.log, ref))

        model = ScriptedModel([reply("a")])
        await run_autonomous(builder(model, session=ref), "go", max_turns=1, progress=progress)
        assert [["user_message", "assistant_message", "checkpoint"]] == logged
        assert ["user_message", "assistant_message", "checkpoint"] == await kinds(ref.log, ref)

    async def test_a_failed_turn_before_a_budget_exit_keeps_its_own_checkpoint(self) -> None:
        """A turn that failed (and was skipped) still writes its turn_failed checkpoint."""
        ref = memory_session()
        model = ScriptedModel([RuntimeError("flaky")], default=reply("x"))
        result = await run_autonomous(
            builder(model, session=ref),
            "go",
            max_turns=1,
            retry_policy=lambda error, attempt: RetryDecision.SKIP_TURN,
        )
        assert StopReason.MAX_TURNS_EXCEEDED == result.reason
        cps = await checkpoints(ref)
        assert [(True, None), (False, "max_turns_exceeded")] == [
            (c.turn_failed, c.stop_reason) for c in cps
        ]


def _record_batches(ref: SessionRef) -> list[list[str]]:
    """The kinds of each batch appended to ``ref``'s log from now on."""
    batches: list[list[str]] = []
    append = ref.log.append

    async def recording(events: Sequence[Event], **fence: Any) -> list[int]:
        batches.append([str(e.kind) for e in events])
        return await append(events, **fence)

    ref.log.append = recording  # type: ignore[method-assign]
    return batches


class TestMisuse:
    async def test_blank_goal_is_refused_at_once(self) -> None:
        """A blank goal raises ConfigurationError before anything runs."""
        with pytest.raises(ConfigurationError, match="goal"):
            await run_autonomous(builder(ScriptedModel()), "  ")

    async def test_unknown_option_is_named(self) -> None:
        """An unknown keyword names itself."""
        with pytest.raises(ConfigurationError, match=r"max_turn\b"):
            await run_autonomous(builder(ScriptedModel()), "go", max_turn=3)  # type: ignore[call-arg]

    async def test_ask_gate_without_prompter_fails_before_build(self) -> None:
        """An ASK gate with no prompter fails before build runs or any model call."""
        built: list[int] = []

        def build(extra: list[Tool]) -> Agent:
            built.append(1)
            raise AssertionError("build must not run")

        with pytest.raises(GateWouldDeadlock):
            await run_autonomous(build, "go", permissions_gate=Gate(mode=Mode.ASK))
        assert [] == built

    async def test_failing_build_raises_build_error(self) -> None:
        """A build that raises surfaces as BuildError with the cause chained."""
        from autonomous import BuildError

        def build(extra: list[Tool]) -> Agent:
            raise KeyError("no config")

        with pytest.raises(BuildError) as info:
            await run_autonomous(build, "go")
        assert isinstance(info.value.__cause__, KeyError)
