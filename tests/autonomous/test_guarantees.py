"""Guarantees under faults: well-formed resumes, no silent re-runs, nothing acknowledged lost."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
import pytest

from autonomous import (
    Agent,
    AutonomousStatus,
    ConfigurationError,
    ModelResponse,
    StopReason,
    function_tool,
    resume_autonomous,
    run_autonomous,
    send_control,
    send_inject,
    start_autonomous,
)
from autonomous.testing import FakeClock, ScriptedModel, call, done, reply
from eventlog import (
    AssistantMessage,
    Budgets,
    Checkpoint,
    CorruptEvent,
    Event,
    EventKind,
    InboxDelivered,
    InboxQueued,
    SessionFinished,
    SessionRef,
    ToolCallRecord,
    ToolResult,
    UserMessage,
)
from scheduler import ExitOnDeferScheduler, SleepScheduler

from ..support.litellm_http import wait_until
from .helpers import asleep
from .stores import DurableStore

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ref(durable: DurableStore) -> Any:
    """A session on a fresh durable log (each test runs on SQLite and on PostgreSQL)."""
    async with durable.open() as log:
        yield SessionRef(log, "app", "ops", "s1")


class Recorder:
    """A scripted model step that keeps every conversation it was sent."""

    def __init__(self, *answers: ModelResponse) -> None:
        self.answers = list(answers)
        self.sent: list[list[dict[str, Any]]] = []

    def __call__(self, messages: Sequence[dict[str, Any]], tools: Any) -> ModelResponse:
        self.sent.append([dict(m) for m in messages])
        return self.answers.pop(0) if self.answers else reply("ok")


def assert_well_formed(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call is answered once, by id, right after it; no stray result."""
    waiting: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in waiting, f"a result for no open call: {m}"
            waiting.remove(m["tool_call_id"])
            continue
        assert not waiting, f"calls {waiting} have no result before {m['role']}"
        if m["role"] == "assistant":
            waiting = [c["id"] for c in m.get("tool_calls") or ()]
    assert not waiting, f"calls {waiting} have no result"


def agent_on(ref: SessionRef, model: Any, *tools: Any) -> Any:
    """A build function (fresh or resumed) for ``ref``."""

    def build(extra: list[Any], session_id: str | None = None) -> Agent:
        return Agent(model, tools=[*tools, *extra], session=ref)

    return build


def counting_tool(*, idempotent: bool) -> tuple[Any, list[int]]:
    """A tool ``act`` that counts its runs."""
    runs: list[int] = []

    async def act() -> str:
        """Act on the world."""
        runs.append(1)
        return "acted"

    return function_tool(act, idempotent=idempotent), runs


async def crash_in_turn_two(ref: SessionRef, *, inbox: str = "") -> str:
    """Turn 1 closed by a checkpoint, the session's turn budget raised, then turn 2's committed
    prefix: its prompt (with an inbox message when given) and an answer asking for ``act``,
    and no result: the process died while the tool ran. Returns the inbox message id ("" for
    none)."""
    await run_autonomous(agent_on(ref, ScriptedModel([reply("one")])), "watch", max_turns=1)
    events: list[Event] = [Event.create(ref.key, Budgets(max_turns=50), author="operator")]
    ids: tuple[str, ...] = ()
    prompt = "continue"
    if inbox:
        queued = InboxQueued("m-1", inbox)
        events.append(Event.create(ref.key, queued, author="remote"))
        ids, prompt = ("m-1",), f"[Inbox]\n- {inbox}\n\ncontinue"
    events += [
        Event.create(ref.key, UserMessage(prompt, 2, inbox_ids=ids)),
        Event.create(
            ref.key,
            AssistantMessage("", 2, (ToolCallRecord("c1", "act", "{}"),), input_tokens=7),
        ),
    ]
    await ref.log.append(events)
    return ids[0] if ids else ""


class TestInterruptedToolCalls:
    async def test_a_call_cut_short_by_a_crash_is_answered_as_interrupted_not_run_again(
        self, ref: SessionRef
    ) -> None:
        """On resume the open call gets an 'interrupted' result (in the log too); the tool
        does not run again, and what the model is sent is well formed."""
        await crash_in_turn_two(ref)
        tool, runs = counting_tool(idempotent=False)
        model = Recorder(done(), reply("bye"))
        result = await resume_autonomous(agent_on(ref, ScriptedModel(default=model), tool), ref)
        assert (StopReason.COMPLETED, 2, []) == (result.reason, result.turns, runs)
        first = model.sent[0]
        assert_well_formed(first)
        answer = [m for m in first if m["role"] == "tool" and m["tool_call_id"] == "c1"]
        assert answer and answer[0]["content"].startswith("interrupted")
        results = [e.payload for e in await ref.log.read(ref.key, kinds=[EventKind.TOOL_RESULT])]
        outcomes = [r.outcome for r in results if isinstance(r, ToolResult) and r.call_id == "c1"]
        assert ["interrupted"] == outcomes

    async def test_an_idempotent_tool_is_run_again(self, ref: SessionRef) -> None:
        """A tool declared idempotent is re-run on resume and its real result is sent."""
        await crash_in_turn_two(ref)
        tool, runs = counting_tool(idempotent=True)
        model = Recorder(done(), reply("bye"))
        await resume_autonomous(agent_on(ref, ScriptedModel(default=model), tool), ref)
        assert [1] == runs
        answer = [m for m in model.sent[0] if m["role"] == "tool"]
        assert ["acted"] == [m["content"] for m in answer]

    async def test_every_later_request_is_well_formed_and_the_prompt_is_not_repeated(
        self, ref: SessionRef
    ) -> None:
        """After the resumed turn, later turns' requests stay well formed, and the crashed
        turn's inbox message is in the model's history exactly once, then marked delivered."""
        mid = await crash_in_turn_two(ref, inbox="restart db-2")
        tool, _ = counting_tool(idempotent=False)
        model = Recorder(reply("noted"), reply("still here"), done(), reply("bye"))
        result = await resume_autonomous(
            agent_on(ref, ScriptedModel(default=model), tool), ref, max_turns=5
        )
        assert StopReason.COMPLETED == result.reason
        for sent in model.sent:
            assert_well_formed(sent)
            assert 1 == sum("restart db-2" in str(m.get("content")) for m in sent)
        delivered = [
            e.payload for e in await ref.log.read(ref.key, kinds=[EventKind.INBOX_DELIVERED])
        ]
        assert [(mid,)] == [d.message_ids for d in delivered if isinstance(d, InboxDelivered)]

    async def test_a_budget_exit_before_the_resumed_turn_still_closes_its_calls(
        self, ref: SessionRef
    ) -> None:
        """A resume that stops on a budget at once answers the open call in the log, so the
        next resume is well formed too."""
        await crash_in_turn_two(ref)
        tool, _ = counting_tool(idempotent=False)
        quiet = Recorder()
        result = await resume_autonomous(
            agent_on(ref, ScriptedModel(default=quiet), tool), ref, max_input_tokens=1
        )
        assert (StopReason.MAX_TOKENS_EXCEEDED, []) == (result.reason, quiet.sent)
        model = Recorder(done(), reply("bye"))
        # The cap the first resume gave is the session's now: this one lifts it.
        build = agent_on(ref, ScriptedModel(default=model), tool)
        await resume_autonomous(build, ref, max_input_tokens=0)
        assert_well_formed(model.sent[0])

    async def test_a_stop_during_a_tool_call_leaves_a_well_formed_conversation(
        self, ref: SessionRef
    ) -> None:
        """stop() while a tool runs: the call is answered as interrupted in the log, and a
        forced resume sends the model a conversation a provider accepts."""
        started = anyio.Event()

        async def slow() -> str:
            """Take forever."""
            started.set()
            await anyio.sleep_forever()
            return "never"

        model = ScriptedModel([call("slow", {})], default=reply("x"))
        async with start_autonomous(
            agent_on(ref, model, function_tool(slow)), "go", max_turns=0
        ) as h:
            with anyio.fail_after(10):
                await started.wait()
            await h.stop()
        assert AutonomousStatus.STOPPED == h.status
        again = Recorder(done(), reply("bye"))
        result = await resume_autonomous(
            agent_on(ref, ScriptedModel(default=again), function_tool(slow)), ref, force=True
        )
        assert StopReason.COMPLETED == result.reason
        assert_well_formed(again.sent[0])


class TestStopAndWake:
    async def test_a_stop_sent_to_an_idle_session_sticks(self, ref: SessionRef) -> None:
        """A deferred session that is sent stop is not run by a resume (nor listed as due);
        a forced resume runs it."""
        clock = FakeClock()
        first = ScriptedModel([call("schedule_next_turn", {"wake_in_sec": 60}), reply("zz")])
        await run_autonomous(
            agent_on(ref, first), "watch", scheduler=ExitOnDeferScheduler(), clock=clock
        )
        await send_control(ref.log, ref.key, "stop")
        clock.advance(120)
        idle = Recorder()
        result = await resume_autonomous(
            agent_on(ref, ScriptedModel(default=idle)), ref, clock=clock
        )
        assert (StopReason.CONTEXT_CANCELLED, []) == (result.reason, idle.sent)
        assert [] == await ref.log.due_sessions(clock.now())
        with pytest.raises(SessionFinished):
            await send_inject(ref.log, ref.key, "anyone there?")
        forced = Recorder(done(), reply("bye"))
        result = await resume_autonomous(
            agent_on(ref, ScriptedModel(default=forced)), ref, force=True, clock=clock
        )
        assert StopReason.COMPLETED == result.reason

    async def test_a_wake_sent_to_a_deferred_session_ends_the_resumes_wait(
        self, ref: SessionRef
    ) -> None:
        """The resume of a session deferred for an hour starts at once after a wake."""
        clock = FakeClock()
        first = ScriptedModel([call("schedule_next_turn", {"wake_in_sec": 3600}), reply("zz")])
        await run_autonomous(
            agent_on(ref, first), "watch", scheduler=ExitOnDeferScheduler(), clock=clock
        )
        await send_control(ref.log, ref.key, "wake")
        model = Recorder(done(), reply("bye"))
        with anyio.fail_after(10):
            result = await resume_autonomous(
                agent_on(ref, ScriptedModel(default=model)), ref, clock=clock
            )
        assert StopReason.COMPLETED == result.reason

    async def test_a_stop_during_a_sleep_keeps_the_wake_time(self, ref: SessionRef) -> None:
        """The checkpoint of a run stopped while it sleeps keeps the wake time, and a
        (forced) resume waits out the rest of the sleep."""
        clock = FakeClock()
        # The scheduler sleeps on a clock of its own: the lease keeper's tasks sleep on the
        # run's clock from the start, long before the sleep this test waits for.
        sleeps = FakeClock()
        model = ScriptedModel([call("schedule_next_turn", {"wake_in_sec": 600}), reply("zz")])
        async with start_autonomous(
            agent_on(ref, model), "watch", scheduler=SleepScheduler(clock=sleeps), clock=clock
        ) as h:
            await wait_until(lambda: sleeps.sleepers > 0, within=10)
            await h.stop()
        cp = (await ref.log.latest_checkpoint(ref.key)).payload  # type: ignore[union-attr]
        assert isinstance(cp, Checkpoint)
        assert clock.now() + timedelta(seconds=600) == cp.next_wake_at
        again = Recorder(done(), reply("bye"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: resume_autonomous(
                    agent_on(ref, ScriptedModel(default=again)), ref, force=True, clock=clock
                )
            )
            await wait_until(lambda: clock.sleepers > 0, within=10)
            assert [] == again.sent  # still waiting for the wake time
            clock.advance(600)
        assert again.sent


class TestNothingAcknowledgedIsLost:
    async def test_a_remote_inject_after_the_runs_last_read_is_delivered_on_resume(
        self, ref: SessionRef, durable: DurableStore
    ) -> None:
        """An inject appended by another process as the run writes its deferred checkpoint
        (after the run's last read, before that write) is delivered by the next resume,
        whether the run's watch saw it come or not (a store's notification may wake the
        watch at once; a poll would not)."""
        sneaked: list[str] = []

        async def sneak(events: Any, lease: Any) -> Any:  # the run's last write
            async with durable.open() as other:
                sneaked.append(await send_inject(other, ref.key, "late news"))
            return await last_write(events, lease)

        last_write = ref.log.append_and_release
        ref.log.append_and_release = sneak  # type: ignore[method-assign]
        first = ScriptedModel([call("schedule_next_turn", {"wake_in_sec": 1}), reply("zz")])
        deferred = await run_autonomous(
            agent_on(ref, first), "watch", scheduler=ExitOnDeferScheduler()
        )
        ref.log.append_and_release = last_write  # type: ignore[method-assign]
        assert (StopReason.DEFERRED, 1) == (deferred.reason, len(sneaked))
        model = Recorder(done(), reply("bye"))
        clock = FakeClock()
        clock.advance(10)
        await resume_autonomous(agent_on(ref, ScriptedModel(default=model)), ref, clock=clock)
        assert "late news" in model.sent[0][-1]["content"]

    async def test_an_inject_during_the_last_turn_gets_one_more_turn(self, ref: SessionRef) -> None:
        """A message acknowledged while the model calls the done tool is delivered in one
        more turn, and the run completes."""
        sent: list[str] = []

        async def first_answer(messages: Any, tools: Any) -> ModelResponse:
            await send_inject(ref.log, ref.key, "one more thing")
            return done()

        model = Recorder(reply("handled"))
        scripted = ScriptedModel([first_answer, reply("ok")], default=model)
        result = await run_autonomous(agent_on(ref, scripted), "go", max_turns=5)
        sent = [str(m["content"]) for m in model.sent[0]]
        assert StopReason.COMPLETED == result.reason
        assert (2, ()) == (result.turns, result.undelivered)
        assert any("one more thing" in text for text in sent)

    async def test_an_inject_with_no_budget_left_is_reported_undelivered_and_kept(
        self, ref: SessionRef
    ) -> None:
        """With no turn left, the message is in RunResult.undelivered and a later resume of
        the session delivers it."""

        async def first_answer(messages: Any, tools: Any) -> ModelResponse:
            await send_inject(ref.log, ref.key, "one more thing")
            return reply("working")

        scripted = ScriptedModel([first_answer])
        result = await run_autonomous(agent_on(ref, scripted), "go", max_turns=1)
        assert ("one more thing",) == result.undelivered
        model = Recorder(done(), reply("bye"))
        await resume_autonomous(agent_on(ref, ScriptedModel(default=model)), ref, max_turns=3)
        assert "one more thing" in model.sent[0][-1]["content"]


class TestFinishedSessions:
    async def test_a_completed_session_reports_what_it_never_delivered(
        self, ref: SessionRef, durable: DurableStore
    ) -> None:
        """A message appended in the moment between the run's last read and its final
        checkpoint is not dropped in silence: resuming the completed session lists it."""

        async def late(messages: Any, tools: Any) -> ModelResponse:
            return done()

        async def sneak(events: Any, lease: Any) -> Any:  # the run's last write
            async with durable.open() as other:
                await send_inject(other, ref.key, "just in time")
            return await last_write(events, lease)

        last_write = ref.log.append_and_release
        ref.log.append_and_release = sneak  # type: ignore[method-assign]
        await run_autonomous(agent_on(ref, ScriptedModel([late, reply("ok")])), "go")
        ref.log.append_and_release = last_write  # type: ignore[method-assign]
        again = await resume_autonomous(agent_on(ref, ScriptedModel([])), ref)
        assert (StopReason.COMPLETED, ("just in time",)) == (again.reason, again.undelivered)

    async def test_inject_and_control_of_a_completed_session_are_refused(
        self, ref: SessionRef
    ) -> None:
        """SessionFinished, naming the session, and nothing is appended."""
        await run_autonomous(agent_on(ref, ScriptedModel([done(), reply("ok")])), "go")
        before = len(await ref.log.read(ref.key))
        with pytest.raises(SessionFinished, match="app/ops/s1"):
            await send_inject(ref.log, ref.key, "hello?")
        for action in ("pause", "resume", "stop", "wake"):
            with pytest.raises(SessionFinished):
                await send_control(ref.log, ref.key, action)
        assert before == len(await ref.log.read(ref.key))

    async def test_a_fresh_run_on_a_session_with_checkpoints_is_refused(
        self, ref: SessionRef
    ) -> None:
        """run_autonomous would start the totals from zero: a clear error that points to
        resume_autonomous, before any model call."""
        await run_autonomous(agent_on(ref, ScriptedModel([reply("one")])), "go", max_turns=1)
        model = Recorder()
        with pytest.raises(ConfigurationError, match="resume_autonomous"):
            await run_autonomous(agent_on(ref, ScriptedModel(default=model)), "go again")
        assert [] == model.sent


class TestPauseAndBudgets:
    async def test_the_budgets_are_checked_again_after_a_pause(self, ref: SessionRef) -> None:
        """A pause that outlives the wall-clock cap ends the run without another turn, and
        the log shows the run as paused while it is parked."""
        clock = FakeClock()
        model = Recorder(reply("one"))
        async with start_autonomous(
            agent_on(ref, ScriptedModel(default=model)),
            "go",
            max_turns=0,
            max_wallclock=60,
            clock=clock,
        ) as h:
            await h.pause()
            cp = (await ref.log.latest_checkpoint(ref.key)).payload  # type: ignore[union-attr]
            assert isinstance(cp, Checkpoint) and cp.paused
            clock.advance(120)
            await h.resume()
            with anyio.fail_after(10):
                result = await h.wait()
        assert StopReason.WALLCLOCK_EXCEEDED == result.reason
        assert len(model.sent) <= 1

    async def test_max_defer_clamps_the_wake_time_before_the_checkpoint(
        self, ref: SessionRef
    ) -> None:
        """The checkpoint written before a sleep holds the clamped wake time."""
        clock = FakeClock()
        sleeps = FakeClock()  # the scheduler's own: the lease keeper sleeps on the run's
        model = ScriptedModel([call("schedule_next_turn", {"wake_in_sec": 3600}), reply("zz")])
        async with start_autonomous(
            agent_on(ref, model),
            "watch",
            scheduler=SleepScheduler(clock=sleeps),
            clock=clock,
            max_defer=60,
        ) as h:
            await wait_until(lambda: sleeps.sleepers > 0, within=10)
            cp = (await ref.log.latest_checkpoint(ref.key)).payload  # type: ignore[union-attr]
            assert isinstance(cp, Checkpoint)
            assert clock.now() + timedelta(seconds=60) == cp.next_wake_at
            await h.stop()


class TestUnreadableHistory:
    async def test_a_history_row_of_an_unknown_kind_fails_the_resume_clearly(
        self, ref: SessionRef, durable: DurableStore
    ) -> None:
        """CorruptEvent naming session, seq and id; never a silently shorter history."""
        await run_autonomous(agent_on(ref, ScriptedModel([reply("one")])), "go", max_turns=1)
        await ref.log.aclose()
        ((seq, event_id),) = durable.execute(
            "SELECT seq, id FROM {events} WHERE kind = 'assistant_message'"
        )
        durable.execute("UPDATE {events} SET kind = 'assistant_mesage' WHERE seq = ?", (seq,))
        async with durable.open() as log:
            again = SessionRef(log, "app", "ops", "s1")
            with pytest.raises(CorruptEvent) as info:
                await resume_autonomous(agent_on(again, ScriptedModel([reply("x")])), again)
        assert (str(ref.key), seq, event_id) == (
            info.value.session,
            info.value.seq,
            info.value.event_id,
        )


class TestBadRowsInALiveLog:
    async def test_a_bad_row_does_not_blind_the_log_watch(
        self, ref: SessionRef, durable: DurableStore
    ) -> None:
        """A control row that cannot be read, written while the run is live, is passed over:
        a stop sent after it still stops the run."""
        clock, model = FakeClock(), ScriptedModel(default=reply("working"))

        async def before(turn: int) -> None:
            await clock.sleep_until(clock.now() + timedelta(seconds=3))  # three polls a turn

        async with start_autonomous(
            agent_on(ref, model),
            "go",
            max_turns=0,
            control_poll=1,
            before_turn=before,
            clock=clock,
        ) as h:
            await asleep(clock, 3)  # the lease, the watch, and turn 1 before it begins
            await send_control(ref.log, ref.key, "wake")
            broken = durable.execute(
                "UPDATE {events} SET payload = ? WHERE seq = (SELECT max(seq) FROM {events}"
                " WHERE kind = 'control') RETURNING seq",
                ("{broken",),
            )
            assert 1 == len(broken)
            for _ in range(6):  # polls over the bad row, through two turns
                clock.advance(1)
                await asleep(clock, 3)
            await send_control(ref.log, ref.key, "stop")
            clock.advance(1)
            with anyio.fail_after(10):
                result = await h.wait()
        assert StopReason.CONTEXT_CANCELLED == result.reason


class TestRequestsAProviderAccepts:
    async def test_an_empty_answer_does_not_make_the_next_request_invalid(self) -> None:
        """An answer with no text and no tool calls is sent back as empty text, not null
        content, which OpenAI refuses (the scripted model checks every request)."""
        model = ScriptedModel([reply(""), done(), reply("bye")])
        result = await run_autonomous(lambda extra: Agent(model, tools=extra), "go", max_turns=3)
        assert (StopReason.COMPLETED, []) == (result.reason, model.rejections)

    def test_a_bare_list_parameter_has_an_items_schema(self) -> None:
        """OpenAI refuses an array schema without items."""

        def tag(names: list, seen: set) -> str:  # type: ignore[type-arg]
            """Tag the names."""
            return ""

        props = function_tool(tag).spec()["function"]["parameters"]["properties"]
        assert {"items": {}} == {"items": props["names"]["items"]}
        assert {} == props["seen"]["items"]
