"""The edges an operator meets first: a session from its first event, budgets that belong to
the session, a retry that keeps what its failed attempt did, the error behind a failure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from autonomous import (
    Agent,
    ConfigurationError,
    RetryDecision,
    StopReason,
    function_tool,
    resume_autonomous,
    run_autonomous,
    send_control,
    send_inject,
    start_autonomous,
)
from autonomous.testing import ScriptedModel, call, done, reply
from eventlog import (
    AssistantMessage,
    Budgets,
    Checkpoint,
    Event,
    EventKind,
    InboxDelivered,
    InboxQueued,
    SessionRef,
    ToolCallRecord,
    ToolResult,
    UserMessage,
)
from permissions import Caller
from scheduler import ExitOnDeferScheduler

from .helpers import checkpoints, memory_session, payloads
from .stores import DurableStore

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ref(durable: DurableStore) -> Any:
    """A session on a fresh durable log (each test runs on SQLite and on PostgreSQL)."""
    async with durable.open() as log:
        yield SessionRef(log, "edges", "ops", "s1")


def agent_on(ref: SessionRef, model: ScriptedModel, *tools: Any) -> Any:
    """A build function for run_autonomous and resume_autonomous on ``ref``."""

    def build(extra: list[Any], session_id: str = "") -> Agent:
        return Agent(model, instructions="watch", tools=[*tools, *extra], session=ref)

    return build


def prompts(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The user messages of a request."""
    return [m["content"] for m in messages if m["role"] == "user"]


def results(messages: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The tool results of a request: (call id, content)."""
    return [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]


class Done:
    """A model step calling the done tool that keeps the request it answered."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def __call__(self, messages: Sequence[dict[str, Any]], tools: object) -> Any:
        self.sent = [dict(m) for m in messages]
        return done()


def act() -> str:
    """Act on the world."""
    return "acted"


class TestInjects:
    async def test_the_handle_and_send_inject_write_the_same_event(self) -> None:
        """One inject event, whoever sends it: the message, its originator, and an author
        naming the channel and the caller's identity."""
        ref = memory_session()
        ana = Caller("ana", {"team": "ops"})
        remote_id = await send_inject(ref.log, ref.key, "rotate the key", caller=ana)
        model = ScriptedModel(default=reply("waiting"))
        async with start_autonomous(agent_on(ref, model), "the goal", max_turns=2) as handle:
            await handle.ready()
            await handle.inject_as("rotate the key", ana)
            await handle.stop()
        events = await ref.log.read(ref.key, kinds=[EventKind.INBOX_QUEUED])
        assert ["remote:ana", "handle:ana"] == [e.author for e in events]
        remote_q, handle_q = (e.payload for e in events)
        assert isinstance(handle_q, InboxQueued) and isinstance(remote_q, InboxQueued)
        assert remote_id == remote_q.message_id != handle_q.message_id
        assert attrs.evolve(handle_q, message_id="") == attrs.evolve(remote_q, message_id="")

    async def test_a_blank_inject_is_refused_by_both(self) -> None:
        """Neither the handle nor send_inject writes a blank message."""
        ref = memory_session()
        model = ScriptedModel(default=reply("waiting"))
        async with start_autonomous(agent_on(ref, model), "the goal", max_turns=2) as handle:
            with pytest.raises(ConfigurationError, match="non-blank"):
                await handle.inject("  ")
            await handle.stop()
        with pytest.raises(ConfigurationError, match="non-blank"):
            await send_inject(ref.log, ref.key, "\n")
        assert [] == await ref.log.read(ref.key, kinds=[EventKind.INBOX_QUEUED])


class TestFromTheFirstEvent:
    async def test_an_inject_sent_before_the_first_run_reaches_its_first_turn(
        self, ref: SessionRef
    ) -> None:
        """A message acknowledged before any run took the session's lease is delivered in
        the first turn, and recorded as delivered."""
        message_id = await send_inject(ref.log, ref.key, "rotate the key")
        model = ScriptedModel([done()])
        result = await run_autonomous(agent_on(ref, model), "the goal", max_turns=3)
        assert (StopReason.COMPLETED, ()) == (result.reason, result.undelivered)
        assert ["[Inbox]\n- rotate the key\n\nthe goal"] == prompts(model.last_messages)
        delivered = await payloads(ref, EventKind.INBOX_DELIVERED, InboxDelivered)
        assert [(message_id,)] == [d.message_ids for d in delivered]

    async def test_an_inject_on_a_memory_log_before_the_run_is_delivered_too(self) -> None:
        """Without a log watch (a log that is not durable), the run reads it once at start."""
        ref = memory_session()
        await send_inject(ref.log, ref.key, "hello")
        model = ScriptedModel([done()])
        await run_autonomous(agent_on(ref, model), "the goal")
        assert ["[Inbox]\n- hello\n\nthe goal"] == prompts(model.last_messages)

    async def test_a_stop_sent_before_the_first_run_stops_it_before_any_model_call(
        self, ref: SessionRef
    ) -> None:
        """The stop sticks: the run ends at once, stopped, and a resume needs force."""
        await send_control(ref.log, ref.key, "stop")
        model = ScriptedModel()  # any call would raise ScriptExhausted
        result = await run_autonomous(agent_on(ref, model), "the goal")
        assert (StopReason.CONTEXT_CANCELLED, 0, 0) == (
            result.reason,
            result.turns,
            model.requests,
        )
        assert (await checkpoints(ref))[-1].stopped
        again = await resume_autonomous(agent_on(ref, model), ref)
        assert (StopReason.CONTEXT_CANCELLED, 0) == (again.reason, model.requests)

    async def test_a_new_durable_session_records_its_start_before_the_first_model_call(
        self, ref: SessionRef
    ) -> None:
        """Budgets and a first checkpoint (the goal, no turns) are in the log before the
        model is first called: a run that dies in its first turn leaves them."""
        seen: list[list[str]] = []
        starts: list[Checkpoint] = []

        async def look(messages: object, tools: object) -> Any:
            events = await ref.log.read(ref.key)
            seen.append([str(e.kind) for e in events])
            starts.extend(e.payload for e in events if isinstance(e.payload, Checkpoint))
            return done()

        await run_autonomous(agent_on(ref, ScriptedModel([look])), "the goal", max_turns=7)
        assert [["budgets", "checkpoint"]] == seen
        start = starts[0]
        assert (0, None, "the goal", "the goal") == (
            start.turns,
            start.stop_reason,
            start.goal,
            start.next_prompt,
        )
        assert Budgets(max_turns=7) == start.budgets

    async def test_a_session_a_run_started_is_not_started_again(self, ref: SessionRef) -> None:
        """A second run on a session whose first run died before its first checkpoint (an
        older release wrote none at start) is refused: its turns and totals would restart."""
        await ref.log.append(
            [
                Event.create(ref.key, UserMessage("the goal", 1)),
                Event.create(ref.key, AssistantMessage("", 1, input_tokens=10, output_tokens=5)),
            ]
        )
        model = ScriptedModel()
        with pytest.raises(ConfigurationError, match="already exists"):
            await run_autonomous(agent_on(ref, model), "the goal")
        assert 0 == model.requests

    async def test_a_session_with_only_messages_sent_to_it_may_be_started(
        self, ref: SessionRef
    ) -> None:
        """Injects and control requests do not make a session started: its first run goes."""
        await send_inject(ref.log, ref.key, "hi")
        await send_control(ref.log, ref.key, "pause")
        await send_control(ref.log, ref.key, "resume")
        result = await run_autonomous(agent_on(ref, ScriptedModel([done()])), "the goal")
        assert StopReason.COMPLETED == result.reason


#: A tool call the model asked for, whose tool the agents here do not have.
LOOK = ToolCallRecord("c1", "look", "{}")


class TestCrashedTurns:
    async def test_every_answer_in_the_log_counts_after_a_crash_in_the_first_turn(
        self, ref: SessionRef
    ) -> None:
        """A run that died in turn 1, after its first answer: the resume counts that call,
        goes on with the goal, and calls the model once more."""
        model = ScriptedModel([done()])
        start = Checkpoint(0, 0, 0, 0.0, "the goal", goal="the goal", budgets=Budgets(5))
        await ref.log.append(
            [
                Event.create(ref.key, Budgets(max_turns=5)),
                Event.create(ref.key, start),
                Event.create(ref.key, UserMessage("the goal", 1)),
                Event.create(
                    ref.key,
                    AssistantMessage(
                        "",
                        1,
                        (ToolCallRecord("c1", "look", "{}"),),
                        input_tokens=10,
                        output_tokens=5,
                    ),
                ),
            ]
        )
        result = await resume_autonomous(agent_on(ref, model), ref)
        assert (StopReason.COMPLETED, 1, 20, 10) == (
            result.reason,
            result.turns,
            result.input_tokens,
            result.output_tokens,
        )
        assert ["the goal"] == prompts(model.last_messages)


class TestRetries:
    async def test_a_retried_turn_keeps_the_tool_calls_its_failed_attempt_made(self) -> None:
        """The model sees the call that ran and its result, so it has no reason to make it
        again: the side effect happens once."""
        ref = memory_session()
        runs: list[int] = []

        def act() -> str:
            """Act on the world."""
            runs.append(1)
            return "acted"

        finish = Done()
        model = ScriptedModel([call("act", id="a1"), RuntimeError("flaky"), finish])
        result = await run_autonomous(
            agent_on(ref, model, function_tool(act)),
            "the goal",
            retry_policy=lambda error, attempt: RetryDecision.RETRY_TURN,
        )
        assert (StopReason.COMPLETED, [1]) == (result.reason, runs)
        assert ["the goal"] == prompts(finish.sent)
        assert [("a1", "acted")] == results(finish.sent)

    async def test_a_crash_during_a_retry_resumes_the_same_turn(self, ref: SessionRef) -> None:
        """The checkpoint of a failed attempt leaves its turn open: a resume goes on with it
        (its prompt once, the answered call kept), not with a new turn."""
        budgets = Budgets(max_turns=5)
        start = Checkpoint(0, 0, 0, 0.0, "the goal", goal="the goal", budgets=budgets)
        failed = Checkpoint(
            1,
            10,
            5,
            0.0,
            "the goal",
            goal="the goal",
            budgets=budgets,
            turn_failed=True,
            failed_attempts=1,
            error="ModelError: flaky",
            open_turn=1,
            model_calls=1,
        )
        answer = AssistantMessage("", 1, (ToolCallRecord("a1", "act", "{}"),), input_tokens=10)
        await ref.log.append(
            [
                Event.create(ref.key, budgets),
                Event.create(ref.key, start),
                Event.create(ref.key, UserMessage("the goal", 1)),
                Event.create(ref.key, answer),
                Event.create(ref.key, ToolResult("a1", "act", "acted", 1)),
                Event.create(ref.key, failed),
            ]
        )
        finish = Done()
        result = await resume_autonomous(agent_on(ref, ScriptedModel([finish])), ref)
        assert (StopReason.COMPLETED, 1) == (result.reason, result.turns)
        assert ["the goal"] == prompts(finish.sent)
        assert [("a1", "acted")] == results(finish.sent)

    async def test_an_aborted_retry_closes_the_turn_with_what_it_did(self, ref: SessionRef) -> None:
        """An attempt that fails and ends the run: its checkpoint closes the turn (a forced
        resume later sees the call that ran) and records the failure."""
        first = ScriptedModel([call("act", id="a1"), RuntimeError("flaky")])
        result = await run_autonomous(
            agent_on(ref, first, function_tool(act)), "the goal", max_turns=5
        )
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        last = (await checkpoints(ref))[-1]
        assert (True, 0) == (last.turn_failed, last.open_turn)
        assert last.error.startswith("ModelError: ")
        finish = Done()
        await resume_autonomous(
            agent_on(ref, ScriptedModel([finish]), function_tool(act)), ref, max_turns=6
        )
        assert [("a1", "acted")] == results(finish.sent)


class TestBudgets:
    async def test_a_resume_runs_under_the_budgets_the_session_started_with(
        self, ref: SessionRef
    ) -> None:
        """max_turns=2 given to the first run holds after the session defers: a resume
        without budgets stops at the second turn, not at the default of 50."""
        model = ScriptedModel(
            [call("schedule_next_turn", {"wake_in_sec": 1})], default=reply("again")
        )
        options: dict[str, Any] = {"scheduler": ExitOnDeferScheduler()}
        first = await run_autonomous(agent_on(ref, model), "the goal", max_turns=2, **options)
        assert StopReason.DEFERRED == first.reason
        wake = ScriptedModel(default=reply("again"))
        await ref.log.append([])  # nothing: the wake time is one second away
        await send_control(ref.log, ref.key, "wake")
        result = await resume_autonomous(agent_on(ref, wake), ref, **options)
        assert (StopReason.MAX_TURNS_EXCEEDED, 2) == (result.reason, result.turns)
        assert all(Budgets(max_turns=2) == cp.budgets for cp in await checkpoints(ref))

    async def test_a_budget_given_to_a_resume_is_the_sessions_from_then_on(
        self, ref: SessionRef
    ) -> None:
        """A change is recorded (a budgets event) and later resumes run under it."""
        model = ScriptedModel(default=reply("again"))
        await run_autonomous(agent_on(ref, model), "the goal", max_turns=1)
        raised = await resume_autonomous(agent_on(ref, model), ref, max_turns=3)
        assert (StopReason.MAX_TURNS_EXCEEDED, 3) == (raised.reason, raised.turns)
        recorded = await payloads(ref, EventKind.BUDGETS, Budgets)
        assert [1, 3] == [b.max_turns for b in recorded]
        again = await resume_autonomous(agent_on(ref, model), ref)
        assert (StopReason.MAX_TURNS_EXCEEDED, 3) == (again.reason, again.turns)
        assert [1, 3] == [b.max_turns for b in await payloads(ref, EventKind.BUDGETS, Budgets)]

    async def test_a_dollar_cap_without_prices_is_refused_before_any_model_call(self) -> None:
        """A cap that could never stop the run is a misuse: the error names the model and
        the fix."""
        model = ScriptedModel([done()])
        with pytest.raises(ConfigurationError, match=r"'scripted'.*pricing=Pricing"):
            await run_autonomous(agent_on(memory_session(), model), "go", max_cost_usd=1.0)
        assert 0 == model.requests


class TestTheErrorBehindAFailure:
    async def test_the_final_checkpoint_records_the_error_with_secrets_masked(
        self, ref: SessionRef
    ) -> None:
        """An operator reads why the run failed in the log: type and message, bounded, a
        key in the message masked."""
        boom = RuntimeError("401 from the provider: api_key=sk-live-abcdef123456 " + "x" * 3000)
        result = await run_autonomous(agent_on(ref, ScriptedModel([boom])), "the goal")
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        error = (await checkpoints(ref))[-1].error
        assert error.startswith("ModelError: model call to scripted failed: 401 from")
        assert "abcdef" not in error and len(error) < 1100
