"""Observability of real runs: the progress callback and streams, content-free events and logs,
and OpenTelemetry spans and counters on in-memory exporters."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

import anyio
import attrs
import pytest
import structlog
from opentelemetry.sdk.trace import ReadableSpan

from autonomous import (
    Agent,
    AutonomousStatus,
    CheckpointWritten,
    ModelCalled,
    ModelCalling,
    ModelResponse,
    Paused,
    ProgressEvent,
    Resumed,
    RunExited,
    Sleeping,
    StopReason,
    Tool,
    ToolCalled,
    ToolCalling,
    TurnFinished,
    TurnStarted,
    Woke,
    function_tool,
    run_autonomous,
    start_autonomous,
)
from autonomous._observe._supervisor import Steer
from autonomous.testing import FakeClock, ScriptedModel, call, calls, done, reply, server
from autonomous.testing._server import ScriptedServer
from scheduler import SleepScheduler
from usage import Pricing

from ..support.litellm_http import API_KEY, MODEL
from ..support.otel import Otel
from .helpers import BOOM, TICK, builder, memory_session

pytestmark = pytest.mark.anyio


class Collector:
    """A progress callback that keeps every (turn, event) it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, ProgressEvent]] = []

    def __call__(self, turn: int, event: ProgressEvent) -> None:
        self.calls.append((turn, event))

    @property
    def events(self) -> list[ProgressEvent]:
        """The events alone, in order."""
        return [event for _, event in self.calls]


class Gatekeeper:
    """A model step that blocks until released, so tests can act while a turn is in flight."""

    def __init__(self, answer: ModelResponse) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.answer = answer

    async def __call__(self, messages: object, tools: object) -> ModelResponse:
        self.entered.set()
        await self.release.wait()
        return self.answer


async def drain(stream: Any) -> list[ProgressEvent]:
    """Every event a stream yields until it ends."""
    return [event async for event in stream]


def one_turn_with_a_tool() -> list[ModelResponse]:
    """A script: tick, done, a closing answer."""
    return [call("tick", {"n": 1}), done("counted"), reply("summary")]


ONE_TURN_EVENTS: list[ProgressEvent] = [
    TurnStarted(1, 1),
    ModelCalling(1, "scripted"),
    ModelCalled(1, "scripted", 10, 5, 0.0, 1),
    ToolCalling(1, "tick"),
    ToolCalled(1, "tick", "ok"),
    ModelCalling(1, "scripted"),
    ModelCalled(1, "scripted", 10, 5, 0.0, 1),
    ToolCalling(1, "report_done"),
    ToolCalled(1, "report_done", "ok"),
    ModelCalling(1, "scripted"),
    ModelCalled(1, "scripted", 10, 5, 0.0, 0),
    TurnFinished(1, 3, None),
    CheckpointWritten(1, "completed"),
    RunExited(1, "completed"),
]


# --------------------------------------------------------------------------- the callback


class TestProgressCallback:
    async def test_a_run_reports_each_step_in_order(self) -> None:
        """The callback gets turn start, model calls with usage, tool calls with outcome,
        turn end, the final checkpoint and the exit, each with its turn."""
        seen = Collector()
        model = ScriptedModel(one_turn_with_a_tool())
        await run_autonomous(builder(model, tools=[TICK]), "count", progress=seen)
        assert ONE_TURN_EVENTS == seen.events
        assert [1] * len(ONE_TURN_EVENTS) == [turn for turn, _ in seen.calls]

    async def test_an_async_callback_is_awaited(self) -> None:
        """An async callback sees the same events as a sync one."""
        events: list[ProgressEvent] = []

        async def progress(turn: int, event: ProgressEvent) -> None:
            await anyio.lowlevel.checkpoint()
            events.append(event)

        await run_autonomous(
            builder(ScriptedModel(one_turn_with_a_tool()), tools=[TICK]),
            "count",
            progress=progress,
        )
        assert ONE_TURN_EVENTS == events

    async def test_model_calls_carry_usage_and_cost(self) -> None:
        """ModelCalled has the call's tokens and its priced cost."""
        seen = Collector()
        model = ScriptedModel([reply("a", input_tokens=1000, output_tokens=200)])
        await run_autonomous(
            builder(model),
            "go",
            max_turns=1,
            progress=seen,
            pricing=Pricing(input_per_mtok=2.0, output_per_mtok=10.0),
        )
        (called,) = [e for e in seen.events if isinstance(e, ModelCalled)]
        assert (1000, 200, 0) == (called.input_tokens, called.output_tokens, called.tool_calls)
        assert pytest.approx(0.004) == called.cost_usd

    async def test_tool_outcomes_are_named(self) -> None:
        """Tool calls report ok, error, rejected (bad arguments) and the tool's name."""
        seen = Collector()
        model = ScriptedModel(
            [
                calls([("tick", {"n": 1}), ("boom", {"reason": "x"}), ("tick", {"m": 1})]),
                done(),
                reply("ok"),
            ]
        )
        await run_autonomous(builder(model, tools=[TICK, BOOM]), "go", progress=seen)
        assert [
            ("tick", "ok"),
            ("boom", "error"),
            ("tick", "rejected"),
            ("report_done", "ok"),
        ] == [(e.tool, e.outcome) for e in seen.events if isinstance(e, ToolCalled)]

    async def test_a_failing_callback_never_breaks_the_run(self) -> None:
        """A callback that raises is logged by type and the run completes."""

        def progress(turn: int, event: ProgressEvent) -> None:
            raise ValueError("dashboard down")

        with structlog.testing.capture_logs() as logs:
            result = await run_autonomous(
                builder(ScriptedModel(one_turn_with_a_tool()), tools=[TICK]),
                "count",
                progress=progress,
            )
        assert StopReason.COMPLETED == result.reason
        failures = [e for e in logs if e["event"] == "progress_callback_failed"]
        assert len(ONE_TURN_EVENTS) == len(failures)
        assert {"ValueError"} == {e["error"] for e in failures}


class TestPauseResumeWakeEvents:
    async def test_pause_and_resume_are_reported_at_the_turn_boundary(self) -> None:
        """Pausing during turn 1 reports Paused(2) when the loop parks and Resumed(2) after."""
        seen = Collector()
        step = Gatekeeper(reply("one"))
        model = ScriptedModel([step, done(), reply("ok")])
        async with start_autonomous(builder(model), "go", progress=seen) as h:
            await step.entered.wait()
            async with anyio.create_task_group() as tg:
                tg.start_soon(h.pause)
                await anyio.wait_all_tasks_blocked()
                step.release.set()
            assert AutonomousStatus.PAUSED == h.status
            assert Paused(2) == seen.events[-1]
            await h.resume()
            await h.wait()
        boundary = seen.events.index(Paused(2))
        assert [CheckpointWritten(1, None), Paused(2), Resumed(2), TurnStarted(2, 1)] == (
            seen.events[boundary - 1 : boundary + 3]
        )

    async def test_a_scheduled_sleep_reports_woke(self) -> None:
        """A turn that schedules the next one reports Sleeping with its wake time, sleeps on
        the clock, and reports Woke."""
        clock = FakeClock(autojump=True)
        seen = Collector()
        model = ScriptedModel(
            [
                call("schedule_next_turn", {"wake_in_sec": 600, "next_prompt": "re-check"}),
                reply("sleeping"),
                done(),
                reply("ok"),
            ]
        )
        start = clock.now()
        result = await run_autonomous(
            builder(model),
            "watch",
            scheduler=SleepScheduler(clock=clock),
            clock=clock,
            progress=seen,
        )
        assert StopReason.COMPLETED == result.reason
        assert 600 == (clock.now() - start).total_seconds()
        woke = seen.events.index(Woke(1))
        slept = Sleeping(1, start + timedelta(seconds=600))
        assert [CheckpointWritten(1, None), slept, Woke(1), TurnStarted(2, 1)] == (
            seen.events[woke - 2 : woke + 2]
        )
        assert "re-check" == [m for m in model.last_messages if m["role"] == "user"][-1]["content"]


# --------------------------------------------------------------------------- the stream


class TestProgressStream:
    async def test_several_readers_each_get_every_event(self) -> None:
        """Two streams read at once and the callback all see the same events."""
        seen = Collector()
        model = ScriptedModel(one_turn_with_a_tool())
        got: dict[str, list[ProgressEvent]] = {}

        async def read(name: str, stream: Any) -> None:
            got[name] = await drain(stream)

        async with start_autonomous(builder(model, tools=[TICK]), "go", progress=seen) as h:
            first, second = h.events(), h.events()
            async with anyio.create_task_group() as tg:
                tg.start_soon(read, "first", first)
                tg.start_soon(read, "second", second)
            await h.wait()
        assert ONE_TURN_EVENTS == got["first"] == got["second"] == seen.events

    async def test_a_stream_opened_after_the_end_is_empty(self) -> None:
        """A reader that subscribes after the run ended gets an empty stream at once."""
        async with start_autonomous(builder(ScriptedModel([done(), reply("ok")])), "go") as h:
            await h.wait()
            with anyio.fail_after(1):
                assert [] == await drain(h.events())

    async def test_a_reader_that_never_reads_does_not_block_the_run(self) -> None:
        """With an idle reader, a run of 501 events still finishes; the callback gets them all
        and the idle reader, once it reads, the first 256 (its buffer), then the end.

        501: five per turn (started, model calling, model called, finished, checkpoint) but
        for the last turn, whose checkpoint is the exit's, then the exit."""
        seen = Collector()
        model = ScriptedModel(default=reply("tick"), record=False)
        with anyio.fail_after(10):
            async with start_autonomous(builder(model), "go", max_turns=100, progress=seen) as h:
                idle = h.events()
                result = await h.wait()
        assert (StopReason.MAX_TURNS_EXCEEDED, 100) == (result.reason, result.turns)
        assert 501 == len(seen.events)
        assert seen.events[:256] == await drain(idle)

    async def test_a_reader_that_leaves_is_dropped(self) -> None:
        """A reader that closes its stream is dropped: nobody reads any more."""
        readers: dict[int, int] = {}
        handle: list[Any] = []

        async def before_turn(turn: int) -> None:
            readers[turn] = handle[0]._run.observer.hub.readers

        model = ScriptedModel([reply("one"), reply("two"), done(), reply("ok")])
        async with start_autonomous(builder(model), "go", before_turn=before_turn) as h:
            handle.append(h)
            stream = h.events()
            first = await stream.__anext__()
            assert isinstance(stream, _Closable)
            await stream.aclose()
            result = await h.wait()
        assert (StopReason.COMPLETED, TurnStarted(1, 1)) == (result.reason, first)
        # Dropped at the first event sent after it left (turn 2's): none by turn 3.
        assert (1, 0) == (readers[1], readers[3])

    async def test_a_reader_dropped_without_reading_is_dropped(self) -> None:
        """A stream that is thrown away unread is dropped: nobody reads any more."""
        readers: dict[int, int] = {}
        handle: list[Any] = []

        async def before_turn(turn: int) -> None:
            if turn == 2:
                gc.collect()
            readers[turn] = handle[0]._run.observer.hub.readers

        model = ScriptedModel([reply("one"), reply("two"), done(), reply("ok")])
        async with start_autonomous(builder(model), "go", before_turn=before_turn) as h:
            handle.append(h)
            h.events()  # subscribed, then dropped on the floor
            result = await h.wait()
        assert StopReason.COMPLETED == result.reason
        # As for a reader that closed its stream: dropped by the first event after it left.
        assert (1, 0) == (readers[1], readers[3])


# --------------------------------------------------------------------------- no content


MARKERS = (
    "GOAL-MARKER-1",
    "ARG-MARKER-2",
    "RESULT-MARKER-3",
    "INBOX-MARKER-4",
    "REPLY-MARKER-5",
    "DETAIL-MARKER-6",
    "ERROR-MARKER-7",
    "STEER-MARKER-8",
    "OUTCOME-RESULT-MARKER-9",
    "INSTRUCTIONS-MARKER-10",
)


async def echo(text: str) -> str:
    """Echo text back with a marker."""
    return f"{text} RESULT-MARKER-3"


def fail(text: str) -> str:
    """Fail, quoting text."""
    raise RuntimeError(f"ERROR-MARKER-7 {text}")


def content_run() -> tuple[ScriptedModel, list[Tool]]:
    """A model and tools whose every prompt, argument and result carries a marker."""
    model = ScriptedModel(
        [
            calls([("echo", {"text": "ARG-MARKER-2"}), ("fail", {"text": "ARG-MARKER-2"})]),
            reply("REPLY-MARKER-5"),
            call(
                "report_done",
                {
                    "state": "done",
                    "detail": "DETAIL-MARKER-6",
                    "outcome": "resolved",
                    "result": "OUTCOME-RESULT-MARKER-9",
                },
                text="REPLY-MARKER-5",
            ),
            reply("REPLY-MARKER-5"),
        ]
    )
    return model, [function_tool(echo), function_tool(fail, sync_in_thread=False)]


def leaks(text: str) -> list[str]:
    """The markers found in ``text``."""
    return [m for m in MARKERS if m in text]


class TestContentFree:
    async def test_events_and_info_logs_carry_no_content(self) -> None:
        """No prompt, instruction, steer, argument, result, inbox text, answer or detail reaches
        a progress event or an info-level log line."""
        seen = Collector()
        model, tools = content_run()
        handle: list[Any] = []

        async def before_turn(turn: int) -> None:
            if turn == 2:
                await handle[0].inject("INBOX-MARKER-4")

        with structlog.testing.capture_logs() as logs:
            async with start_autonomous(
                builder(
                    model,
                    tools=tools,
                    session=memory_session(),
                    instructions="INSTRUCTIONS-MARKER-10",
                ),
                "GOAL-MARKER-1",
                outcomes=("resolved", "escalate"),
                progress=seen,
                before_turn=before_turn,
                supervisor=lambda s: Steer("STEER-MARKER-8") if s.turn == 2 else None,
            ) as h:
                handle.append(h)
                stream = h.events()
                streamed = await drain(stream)
                result = await h.wait()
        assert (StopReason.COMPLETED, "OUTCOME-RESULT-MARKER-9") == (result.reason, result.result)
        sent = " ".join(str(m.get("content")) for m in model.last_messages)
        assert {
            "GOAL-MARKER-1",
            "INBOX-MARKER-4",
            "RESULT-MARKER-3",
            "ERROR-MARKER-7",
            "STEER-MARKER-8",
            "INSTRUCTIONS-MARKER-10",
        } <= set(leaks(sent))  # the markers really were in the conversation
        assert streamed == seen.events
        assert [] == [repr(e) for e in seen.events if leaks(repr(e))]
        assert [] == [repr(e) for e in seen.events if leaks(str(vars_of(e)))]
        info = [e for e in logs if e.get("log_level") != "debug"]
        assert {"run_started", "turn_started", "model_call", "tool_call", "run_finished"} <= {
            e["event"] for e in info
        }
        assert [] == [e for e in info if leaks(repr(e))]


def vars_of(event: ProgressEvent) -> dict[str, Any]:
    """An event's fields by name."""
    return attrs.asdict(event)


# --------------------------------------------------------------------------- telemetry


@pytest.fixture
def otel() -> Iterator[Otel]:
    """Fresh in-memory exporters for one test."""
    yield Otel()


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    """The spans called ``name``."""
    return [s for s in spans if s.name == name]


@runtime_checkable
class _Closable(Protocol):
    """A stream a reader can close early (``events()`` is declared an AsyncIterator only)."""

    async def aclose(self) -> None: ...


def parent_id(span: ReadableSpan) -> int | None:
    """The span id of ``span``'s parent."""
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    """``span``'s own span id."""
    assert span.context is not None
    own: int = span.context.span_id
    return own


class TestTelemetry:
    async def test_a_run_makes_nested_spans_with_their_attributes(self, otel: Otel) -> None:
        """invoke_agent > turn > chat / execute_tool, each with its documented attributes only."""
        ref = memory_session()
        model = ScriptedModel(one_turn_with_a_tool())
        await run_autonomous(
            builder(model, tools=[TICK], session=ref), "count", telemetry=otel.telemetry
        )
        spans = otel.finished()
        (run,) = by_name(spans, "invoke_agent agent")
        (turn,) = by_name(spans, "autonomous.turn")
        model_calls = by_name(spans, "chat scripted")
        tool_calls = by_name(spans, "execute_tool tick") + by_name(
            spans, "execute_tool report_done"
        )
        assert (3, 2, 7) == (len(model_calls), len(tool_calls), len(spans))
        assert None is run.parent
        assert span_id(run) == parent_id(turn)
        assert {span_id(turn)} == {parent_id(s) for s in model_calls + tool_calls}
        session = str(ref.key)
        assert {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "scripted",
            "gen_ai.agent.name": "agent",
            "gen_ai.conversation.id": session,
            "gen_ai.request.model": "scripted",
        } == dict(run.attributes or {})
        assert {"autonomous.turn": 1} == dict(turn.attributes or {})
        assert {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "scripted",
            "gen_ai.response.model": "scripted",
            "gen_ai.conversation.id": session,
            "autonomous.turn": 1,
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 5,
            "autonomous.cost_usd": 0.0,
        } == dict(model_calls[0].attributes or {})
        assert [("tick", "ok"), ("report_done", "ok")] == [
            (a["gen_ai.tool.name"], a["autonomous.tool_outcome"])
            for a in (dict(s.attributes or {}) for s in tool_calls)
        ]

    async def test_a_run_counts_turns_tools_tokens_cost_and_stops(self, otel: Otel) -> None:
        """The counters add up the run's turns, tool calls, tokens, dollars and its stop."""
        model = ScriptedModel(one_turn_with_a_tool())
        await run_autonomous(
            builder(model, tools=[TICK]),
            "count",
            telemetry=otel.telemetry,
            pricing=Pricing(input_per_mtok=1.0, output_per_mtok=2.0),
        )
        counters = otel.counters()
        cost = counters.pop("autonomous.cost_usd")
        assert {
            "autonomous.turns": {(): 1},
            "autonomous.tool_calls": {
                (("outcome", "ok"), ("tool", "tick")): 1,
                (("outcome", "ok"), ("tool", "report_done")): 1,
            },
            "autonomous.tokens": {(("direction", "input"),): 30, (("direction", "output"),): 15},
            "autonomous.stops": {(("reason", "completed"),): 1},
        } == counters
        assert pytest.approx(6e-5) == cost[()]

    async def test_failures_are_marked_by_kind_with_no_content(self, otel: Otel) -> None:
        """A failing tool marks its span by outcome; no span carries prompt, argument, result,
        answer or error text."""
        model, tools = content_run()
        await run_autonomous(
            builder(model, tools=tools),
            "GOAL-MARKER-1",
            outcomes=("resolved", "escalate"),
            telemetry=otel.telemetry,
        )
        spans = otel.finished()
        failed = [s for s in spans if s.status.status_code.name == "ERROR"]
        assert [("execute_tool fail", "fail", "error")] == [
            (s.name, (s.attributes or {})["gen_ai.tool.name"], (s.attributes or {})["error.type"])
            for s in failed
        ]
        for span in spans:
            text = repr(dict(span.attributes or {})) + repr(span.status.description)
            text += repr([e.attributes for e in span.events])
            assert [] == leaks(text), span.name
        assert {(("reason", "completed"),): 1} == otel.counters()["autonomous.stops"]

    async def test_an_aborted_stop_is_counted_by_reason(self, otel: Otel) -> None:
        """A run stopped by its turn cap is counted under that reason."""
        await run_autonomous(
            builder(ScriptedModel(default=reply("x"))),
            "go",
            max_turns=2,
            telemetry=otel.telemetry,
        )
        counters = otel.counters()
        assert {(("reason", "max_turns_exceeded"),): 1} == counters["autonomous.stops"]
        assert {(): 2} == counters["autonomous.turns"]

    async def test_spans_and_progress_over_http(
        self, otel: Otel, scripted_server: ScriptedServer
    ) -> None:
        """Through litellm: the model span and ModelCalled carry the server's usage."""
        scripted_server.push(
            server.call("report_done", {"state": "done"}, input_tokens=120, output_tokens=12),
            server.reply("done", input_tokens=130, output_tokens=8),
        )
        seen = Collector()

        def build(extra: list[Tool]) -> Agent:
            return Agent(MODEL, tools=extra, api_base=scripted_server.api_base, api_key=API_KEY)

        result = await run_autonomous(
            build, "go", max_turns=2, telemetry=otel.telemetry, progress=seen
        )
        assert StopReason.COMPLETED == result.reason
        usage = [
            (e.input_tokens, e.output_tokens) for e in seen.events if isinstance(e, ModelCalled)
        ]
        assert [(120, 12), (130, 8)] == usage
        model_spans = by_name(otel.finished(), f"chat {MODEL}")
        assert [(MODEL, 120, 12), (MODEL, 130, 8)] == [
            (
                (s.attributes or {})["gen_ai.request.model"],
                (s.attributes or {})["gen_ai.usage.input_tokens"],
                (s.attributes or {})["gen_ai.usage.output_tokens"],
            )
            for s in model_spans
        ]
        assert {(("direction", "input"),): 250, (("direction", "output"),): 20} == (
            otel.counters()["autonomous.tokens"]
        )
