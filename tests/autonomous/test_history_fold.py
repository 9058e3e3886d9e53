"""The conversation is one fold of events: what a live run sends the model is what folding the
events it recorded gives, byte for byte, and a resume folds the same events the same way."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autonomous import Agent, RetryDecision, function_tool, resume_autonomous, run_autonomous
from autonomous._durable._restore import restore
from autonomous._options import RunOptions
from autonomous._state._history import History, Window
from autonomous.testing import ScriptedModel, calls, reply
from eventlog import (
    AssistantMessage,
    Checkpoint,
    Event,
    EventKind,
    MemoryEventLog,
    SessionRef,
    SqliteEventLog,
    ToolCallRecord,
    ToolResult,
    UserMessage,
)

#: One model step: ("reply", text), ("calls", names of the tools asked for) or ("error", "").
Step = tuple[str, Any]

steps = st.one_of(
    st.tuples(st.just("reply"), st.sampled_from(["ok", "", "noted"])),
    st.tuples(
        st.just("calls"),
        st.lists(st.sampled_from(["act", "boom", "nope"]), min_size=1, max_size=3),
    ),
    st.tuples(st.just("error"), st.just("")),
)

#: (history_turns, history, history_keep_turns, summarised)
windows = st.one_of(
    st.just((0, "blocks", 0, False)),
    st.tuples(st.integers(1, 4), st.just("sliding"), st.just(0), st.booleans()),
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(st.just(n), st.just("blocks"), st.integers(0, n), st.booleans())
    ),
)


def act() -> str:
    """Act on the world."""
    return "acted"


def boom() -> str:
    """Fail."""
    raise RuntimeError("boom")


class Recorder:
    """A scripted model's steps that keep every request (and whether it was answered)."""

    def __init__(self, script: Sequence[Step]) -> None:
        self.script = list(script)
        self.requests: list[tuple[list[dict[str, Any]], bool]] = []

    def step(self, kind: str, arg: Any) -> Any:
        """A step answering as ``kind`` says, after keeping the request."""

        def answer(messages: Sequence[dict[str, Any]], tools: object) -> Any:
            self.requests.append(([dict(m) for m in messages], kind != "error"))
            if kind == "error":
                raise RuntimeError("flaky")
            if kind == "reply":
                return reply(arg)
            return calls([(name, {}) for name in arg])

        return answer

    def model(self) -> ScriptedModel:
        """A model that takes the script's steps, then replies with nothing."""
        return ScriptedModel(
            [self.step(kind, arg) for kind, arg in self.script], default=self.step("reply", "")
        )


def dumped(messages: Sequence[dict[str, Any]]) -> str:
    """Messages as a provider reads them: key order counts (a prompt cache's prefix)."""
    return json.dumps(list(messages))


async def live_run(
    script: Sequence[Step], window: tuple[int, str, int, bool], decisions: Sequence[RetryDecision]
) -> tuple[SessionRef, Recorder, RunOptions]:
    """Run ``script`` on a memory session with ``window``; the retry policy answers with
    ``decisions`` in turn (then skips)."""
    turns, mode, keep, summarised = window
    ref = SessionRef(MemoryEventLog(), "fold", "u", "s")
    recorder = Recorder(script)
    model = recorder.model()
    answers = iter(decisions)

    def policy(error: BaseException, attempt: int) -> RetryDecision:
        return next(answers, RetryDecision.SKIP_TURN)

    options: dict[str, Any] = {
        "max_turns": 8,
        "history_turns": turns,
        "history": mode,
        "history_keep_turns": keep,
        "retry_policy": policy,
    }
    if summarised and turns:
        options["history_summary_model"] = ScriptedModel(default=reply("what happened"))
    await run_autonomous(
        lambda extra: Agent(
            model,
            instructions="watch",
            tools=[function_tool(act), function_tool(boom), *extra],
            session=ref,
        ),
        "the goal",
        **options,
    )
    return ref, recorder, RunOptions(history_turns=turns, history=mode, history_keep_turns=keep)


def window_of(opts: RunOptions, summarised: bool) -> Window:
    """The window a run with ``opts`` holds."""
    return Window(opts.history_turns, opts.history_keep, summarised and bool(opts.history_turns))


async def check_live_is_the_fold(
    script: Sequence[Step], window: tuple[int, str, int, bool], decisions: Sequence[RetryDecision]
) -> None:
    """Fold the run's log from its first event, comparing before each answer."""
    ref, recorder, opts = await live_run(script, window, decisions)
    events = await ref.log.read(ref.key)
    answered = [messages for messages, ok in recorder.requests if ok]
    system = answered[0][0]
    history = History(window=window_of(opts, window[3]))
    sent = iter(answered)
    for event in events:
        if event.kind is EventKind.ASSISTANT_MESSAGE:
            # The answer to a call is recorded after it: what came before is what it was sent.
            assert dumped([system, *history.messages]) == dumped(next(sent))
        history.apply(event)
    assert next(sent, None) is None


async def check_resume_folds_like_live(
    script: Sequence[Step], window: tuple[int, str, int, bool], decisions: Sequence[RetryDecision]
) -> None:
    """Compare the fold of the whole log with the resume's, at the resumed run's next call."""
    ref, _, opts = await live_run(script, window, decisions)
    whole = History(window=window_of(opts, window[3]))
    for event in await ref.log.read(ref.key):
        whole.apply(event)
    restored = await restore(ref.log, ref.key, window=window_of(opts, window[3]))
    resumed = restored.history
    open_turn = whole.open_turn
    if open_turn is not None and not open_turn.answered:
        whole.abandon_open_turn()  # a prompt never answered: the resume prompts again
    if whole.open_turn is None:  # what the resumed run's next turn is sent
        assert restored.checkpoint is not None
        prompt = Event.create(ref.key, UserMessage("next", restored.checkpoint.turns + 1))
        whole.apply(prompt)
        resumed.apply(prompt)
    # The resume reads only the window's turns (and the latest summary), and folds them.
    assert dumped(whole.messages) == dumped(resumed.messages)


scripts = st.lists(steps, max_size=14)
retry_decisions = st.lists(st.sampled_from([RetryDecision.RETRY_TURN, RetryDecision.SKIP_TURN]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts, windows, retry_decisions)
def test_what_a_live_run_sends_is_the_fold_of_what_it_recorded(
    script: list[Step], window: tuple[int, str, int, bool], decisions: list[RetryDecision]
) -> None:
    """Every request of a random run (tool calls, failing tools, unknown tools, failed model
    calls retried or skipped, windows cut in blocks or sliding, summaries) equals the history
    folded from the events in the log before the answer to it."""
    anyio.run(check_live_is_the_fold, script, window, decisions)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts, windows, retry_decisions)
def test_a_resume_folds_the_history_the_live_run_ended_with(
    script: list[Step], window: tuple[int, str, int, bool], decisions: list[RetryDecision]
) -> None:
    """The resume's bounded read (the window's turns, the latest summary) folds to the
    history that folding the whole log gives."""
    anyio.run(check_resume_folds_like_live, script, window, decisions)


class Crash(BaseException):
    """Raised by the scripted model: the process dies there, writing nothing more."""


#: Steps of a run that a resume can replay exactly: tools that may run twice, no failures.
replayable = st.one_of(
    st.tuples(st.just("reply"), st.sampled_from(["ok", "", "noted"])),
    st.tuples(st.just("calls"), st.lists(st.sampled_from(["act", "boom"]), min_size=1, max_size=3)),
)


async def check_a_resume_sends_what_the_live_run_did(
    script: Sequence[Step], window: tuple[int, str, int, bool], crash_at: int
) -> None:
    """Crash and resume on a fresh SQLite log (a durable session: it checkpoints its start)."""
    with tempfile.TemporaryDirectory() as folder:
        async with SqliteEventLog(Path(folder) / "runs.db") as log:
            await crash_and_resume(SessionRef(log, "fold", "u", "s"), script, window, crash_at)


async def crash_and_resume(
    ref: SessionRef, script: Sequence[Step], window: tuple[int, str, int, bool], crash_at: int
) -> None:
    """Run ``script`` on ``ref`` until it dies at call ``crash_at``, then resume it."""
    turns, mode, keep, summarised = window
    recorder = Recorder(script)
    steps: list[Any] = [recorder.step(kind, arg) for kind, arg in script]
    crash_at = min(crash_at, len(steps))

    def crash(messages: Sequence[dict[str, Any]], tools: object) -> Any:
        recorder.requests.append(([dict(m) for m in messages], True))
        raise Crash

    steps.insert(crash_at, crash)
    tools = [
        function_tool(act, idempotent=True),
        function_tool(boom, idempotent=True),
    ]
    options: dict[str, Any] = {
        "max_turns": 20,  # more than the calls before the crash: it always comes
        "history_turns": turns,
        "history": mode,
        "history_keep_turns": keep,
    }

    def build(model: ScriptedModel) -> Any:
        if summarised and turns:
            options["history_summary_model"] = ScriptedModel(default=reply("what happened"))
        return lambda extra, *_: Agent(
            model, instructions="watch", tools=[*tools, *extra], session=ref
        )

    try:
        await run_autonomous(build(ScriptedModel(steps)), "the goal", **options)
    except* Crash:
        pass
    live = recorder.requests[-1][0]
    resumed: list[list[dict[str, Any]]] = []

    def first(messages: Sequence[dict[str, Any]], tools: object) -> Any:
        resumed.append([dict(m) for m in messages])
        raise Crash

    try:
        await resume_autonomous(build(ScriptedModel([first])), ref, **options)
    except* Crash:
        pass
    assert 1 == len(resumed)  # the resumed run called the model (and died there too)
    assert dumped(live) == dumped(resumed[0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(replayable, max_size=12), windows, st.integers(0, 12))
def test_a_resume_after_a_crash_sends_what_the_live_run_sent(
    script: list[Step], window: tuple[int, str, int, bool], crash_at: int
) -> None:
    """A process that dies at any model call, resumed, sends that call exactly what the live
    run sent it (its tools run again, so their results are the same): the provider's cached
    prefix holds across the crash."""
    anyio.run(check_a_resume_sends_what_the_live_run_did, script, window, crash_at)


def test_an_open_turn_keeps_its_answered_calls_and_pads_the_rest() -> None:
    """A turn the fold leaves open keeps its committed answers and results; a call with no
    result before the next answer is answered as interrupted (what a provider accepts)."""
    history = History()
    key = SessionRef(MemoryEventLog(), "a", "u", "s").key
    two = (ToolCallRecord("c1", "act", "{}"), ToolCallRecord("c2", "act", "{}"))
    for payload in (
        UserMessage("go", 1),
        AssistantMessage("", 1, two),
        ToolResult("c1", "act", "acted", 1),
        AssistantMessage("next", 1, ()),
    ):
        history.apply(Event.create(key, payload))
    roles = [m["role"] for m in history.messages]
    assert ["user", "assistant", "tool", "tool", "assistant"] == roles
    assert history.messages[3]["tool_call_id"] == "c2"
    assert history.messages[3]["content"].startswith("interrupted")


def folded(*payloads: Any) -> History:
    """The history folded from ``payloads``, in order."""
    history = History()
    key = SessionRef(MemoryEventLog(), "a", "u", "s").key
    for payload in payloads:
        history.apply(Event.create(key, payload))
    return history


def asks(turn: int, *ids: str) -> AssistantMessage:
    """An answer in ``turn`` asking for one ``act`` call per id."""
    return AssistantMessage("", turn, tuple(ToolCallRecord(i, "act", "{}") for i in ids))


def shape(history: History) -> list[str]:
    """Each message as role (and the call it answers)."""
    return [
        f"tool:{m['tool_call_id']}" if m["role"] == "tool" else m["role"] for m in history.messages
    ]


class TestFoldOfOlderLogs:
    """Logs this release never writes (older releases, a process that died mid-call) still
    fold to a conversation a provider accepts."""

    def test_a_result_that_answers_no_waiting_call_is_left_out(self) -> None:
        history = folded(
            UserMessage("go", 1),
            asks(1, "c1"),
            ToolResult("c1", "act", "acted", 1),
            ToolResult("c1", "act", "again", 1),  # a second answer to the same call
            ToolResult("zz", "act", "stray", 1),  # an answer to no call
        )
        assert ["user", "assistant", "tool:c1"] == shape(history)
        assert "acted" == history.messages[-1]["content"]

    def test_a_closing_checkpoint_answers_the_calls_still_waiting(self) -> None:
        history = folded(UserMessage("go", 1), asks(1, "c1", "c2"), Checkpoint(1, 0, 0, 0.0, "x"))
        assert ["user", "assistant", "tool:c1", "tool:c2"] == shape(history)
        assert history.open_turn is None

    def test_a_retry_checkpoint_leaves_its_turn_open(self) -> None:
        retry = Checkpoint(1, 0, 0, 0.0, "x", open_turn=1)
        history = folded(UserMessage("go", 1, inbox_ids=("m1",)), asks(1, "c1"), retry)
        turn = history.open_turn
        assert turn is not None
        assert (1, ("m1",), True, ["c1"], 0, False) == (
            turn.turn,
            turn.inbox_ids,
            turn.answered,
            [c.id for c in turn.calls],
            turn.first_index,
            turn.complete,
        )

    def test_an_open_turn_counts_the_calls_its_answers_made(self) -> None:
        """The first waiting call's index among the turn's calls: its idempotency key."""
        history = folded(
            UserMessage("go", 1),
            asks(1, "c1"),
            ToolResult("c1", "act", "acted", 1),
            asks(1, "c2", "c3"),
            ToolResult("c2", "act", "acted", 1),
        )
        turn = history.open_turn
        assert turn is not None
        assert (["c3"], 2) == ([c.id for c in turn.calls], turn.first_index)

    def test_a_prompt_no_checkpoint_closed_is_closed_by_the_next(self) -> None:
        history = folded(
            UserMessage("one", 1),
            AssistantMessage("done", 1, ()),
            UserMessage("two", 2),
        )
        assert ["one", "done", "two"] == [m["content"] for m in history.messages]

    def test_a_prompt_never_answered_is_replaced_by_the_next(self) -> None:
        history = folded(UserMessage("one", 1), UserMessage("two", 2))
        assert ["two"] == [m["content"] for m in history.messages]

    def test_an_unanswered_prompt_a_checkpoint_closed_stays(self) -> None:
        """A turn whose model call failed and was skipped: the model sees the prompt it missed."""
        history = folded(
            UserMessage("one", 1), Checkpoint(1, 0, 0, 0.0, "x"), UserMessage("two", 2)
        )
        assert ["one", "two"] == [m["content"] for m in history.messages]
