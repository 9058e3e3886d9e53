"""Telemetry after the OpenTelemetry GenAI semantic conventions: span names, attributes, kinds,
histograms, opt-in content, and the trace context handed to MCP requests."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from autonomous import ModelResponse, StopReason, Telemetry, run_autonomous
from autonomous._models._litellm import LiteLLMModel
from autonomous._observe._telemetry import provider_name, trace_context
from autonomous.testing import ScriptedModel, call, reply
from eventlog import SessionRef

from ..support.otel import Otel
from .helpers import TICK, builder, memory_session
from .test_observability import content_run, leaks

pytestmark = [pytest.mark.otel, pytest.mark.anyio]

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


class TestTraceContext:
    def test_empty_outside_any_span(self) -> None:
        """With no span recording, there is no trace context to hand on."""
        assert {} == trace_context()

    def test_traceparent_of_the_current_span(self) -> None:
        """Inside a recording span, ``traceparent`` names its trace and span ids."""
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        with provider.get_tracer("test").start_as_current_span("call") as span:
            headers = trace_context()
            context = span.get_span_context()
        match = _TRACEPARENT.fullmatch(headers["traceparent"])
        assert match is not None
        assert (f"{context.trace_id:032x}", f"{context.span_id:016x}") == match.groups()
        assert 1 == int(headers["traceparent"][-2:], 16) & 1  # sampled
        assert {"traceparent"} == set(headers)

    def test_tracestate_when_set(self) -> None:
        """A span whose context carries a trace state hands it on as ``tracestate``."""
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

        parent = SpanContext(
            trace_id=0x1234,
            span_id=0x5678,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
            trace_state=TraceState([("vendor", "value")]),
        )
        provider = TracerProvider()
        context = trace.set_span_in_context(NonRecordingSpan(parent))
        with provider.get_tracer("test").start_as_current_span("call", context=context):
            headers = trace_context()
        assert "vendor=value" == headers["tracestate"]
        assert headers["traceparent"].startswith(f"00-{0x1234:032x}-")

    def test_empty_for_a_span_that_does_not_record(self) -> None:
        """A non-recording (unsampled) span gives no headers."""
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        span = NonRecordingSpan(
            SpanContext(trace_id=1, span_id=2, is_remote=False, trace_flags=TraceFlags(0))
        )
        with trace.use_span(span):
            assert {} == trace_context()


# ---------------------------------------------------------------------------- a whole run

CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: The histograms' bucket boundaries the conventions advise.
TOKEN_BUCKETS: tuple[float, ...] = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)
TOKEN_BUCKETS += (1048576, 4194304, 16777216, 67108864)
DURATION_BUCKETS: tuple[float, ...] = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56)
DURATION_BUCKETS += (5.12, 10.24, 20.48, 40.96, 81.92)


def attributes(span: ReadableSpan) -> dict[str, Any]:
    """``span``'s attributes as a plain dict."""
    return dict(span.attributes or {})


def span_id(span: ReadableSpan) -> int:
    """``span``'s own span id."""
    assert span.context is not None
    own: int = span.context.span_id
    return own


def parent_id(span: ReadableSpan) -> int | None:
    """The span id of ``span``'s parent."""
    return span.parent.span_id if span.parent is not None else None


def everything_on(span: ReadableSpan) -> str:
    """Every attribute, event and status text of ``span``, as one text."""
    text = repr(attributes(span)) + repr(span.status.description) + span.name
    return text + repr([(e.name, dict(e.attributes or {})) for e in span.events])


def tick_script() -> list[ModelResponse]:
    """A script: tick, done, a closing answer."""
    return [
        call("tick", {"n": 1}, id="call-tick"),
        call("report_done", {"state": "done"}, id="call-done"),
        reply("summary"),
    ]


async def tick_run(otel: Otel) -> SessionRef:
    """One turn with a tool call, a done call and a closing answer; its session."""
    ref = memory_session("disk-1")
    build = builder(ScriptedModel(tick_script()), tools=[TICK], session=ref)
    result = await run_autonomous(build, "count", telemetry=otel.telemetry)
    assert StopReason.COMPLETED == result.reason
    return ref


class TestRunSpans:
    async def test_names_and_nesting(self) -> None:
        """invoke_agent {agent} > autonomous.turn > chat {model} / execute_tool {tool}."""
        otel = Otel()
        await tick_run(otel)
        (run,) = otel.named("invoke_agent agent")
        (turn,) = otel.named("autonomous.turn")
        chats = otel.named("chat scripted")
        tools = otel.named("execute_tool tick") + otel.named("execute_tool report_done")
        assert (3, 2, 7) == (len(chats), len(tools), len(otel.finished()))
        assert None is run.parent
        assert span_id(run) == parent_id(turn)
        assert {span_id(turn)} == {parent_id(s) for s in chats + tools}

    async def test_span_kinds(self) -> None:
        """A model call is a CLIENT span; the run, its turns and tool calls are INTERNAL."""
        otel = Otel()
        await tick_run(otel)
        kinds = {s.name: s.kind for s in otel.finished()}
        assert {
            "invoke_agent agent": SpanKind.INTERNAL,
            "autonomous.turn": SpanKind.INTERNAL,
            "chat scripted": SpanKind.CLIENT,
            "execute_tool tick": SpanKind.INTERNAL,
            "execute_tool report_done": SpanKind.INTERNAL,
        } == kinds

    async def test_run_span_attributes(self) -> None:
        """The run span names the operation, provider, agent, model and conversation."""
        otel = Otel()
        ref = await tick_run(otel)
        (run,) = otel.named("invoke_agent agent")
        assert {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "scripted",
            "gen_ai.agent.name": "agent",
            "gen_ai.conversation.id": str(ref.key),
            "gen_ai.request.model": "scripted",
        } == attributes(run)

    async def test_chat_span_attributes(self) -> None:
        """A model call's span carries the GenAI attributes, its usage and our own."""
        otel = Otel()
        ref = await tick_run(otel)
        first = otel.named("chat scripted")[0]
        assert {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "scripted",
            "gen_ai.response.model": "scripted",
            "gen_ai.conversation.id": str(ref.key),
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 5,
            "autonomous.turn": 1,
            "autonomous.cost_usd": 0.0,
        } == attributes(first)

    async def test_tool_span_attributes(self) -> None:
        """A tool call's span names the tool, the call id and its outcome."""
        otel = Otel()
        ref = await tick_run(otel)
        (tick_span,) = otel.named("execute_tool tick")
        assert {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "tick",
            "gen_ai.tool.call.id": "call-tick",
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": str(ref.key),
            "autonomous.turn": 1,
            "autonomous.tool_outcome": "ok",
        } == attributes(tick_span)
        (done_span,) = otel.named("execute_tool report_done")
        assert "call-done" == attributes(done_span)["gen_ai.tool.call.id"]

    async def test_a_failed_model_call_has_its_error_type(self) -> None:
        """A model call that raises marks its span with the error's type name only."""
        otel = Otel()
        model = ScriptedModel([RuntimeError("SECRET-ERROR-TEXT")])
        result = await run_autonomous(builder(model), "go", max_turns=1, telemetry=otel.telemetry)
        assert StopReason.COMPLETED != result.reason
        (chat,) = otel.named("chat scripted")
        assert (StatusCode.ERROR, "ModelError") == (
            chat.status.status_code,
            chat.status.description,
        )
        assert "ModelError" == attributes(chat)["error.type"]
        assert "SECRET-ERROR-TEXT" not in everything_on(chat)
        (point,) = otel.points("gen_ai.client.operation.duration").items()
        assert ("error.type", "ModelError") in point[0]

    async def test_a_history_summary_call_is_a_chat_span_of_its_turn(self) -> None:
        """The summary model's call, made as turn 5 starts (its window of 4 is cut to 1), is a
        ``chat`` span of that turn, with its usage; its tokens are counted with the rest."""
        otel = Otel()
        summarizer = ScriptedModel([reply("sum", input_tokens=70, output_tokens=7)], name="cheap")
        result = await run_autonomous(
            builder(ScriptedModel([reply(f"ok {n}") for n in range(6)])),
            "watch",
            max_turns=6,
            history_turns=4,
            history_summary_model=summarizer,
            telemetry=otel.telemetry,
        )
        (chat,) = otel.named("chat cheap")
        turns = otel.named("autonomous.turn")
        assert (6, 60 + 70) == (result.turns, result.input_tokens)
        assert parent_id(chat) == span_id(turns[4])
        assert (5, 70, 7) == tuple(
            attributes(chat)[k]
            for k in ("autonomous.turn", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
        )


class TestProvider:
    @pytest.mark.parametrize(
        ("expected", "model"),
        [
            ("openai", "openai/gpt-4o-mini"),
            ("anthropic", "anthropic/claude-sonnet-4"),
            ("aws.bedrock", "bedrock/anthropic.claude-v2"),
            ("azure.ai.openai", "azure/my-deployment"),
            ("gcp.vertex_ai", "vertex_ai/gemini-pro"),
            ("gcp.gemini", "gemini/gemini-2.0-flash"),
            ("mistral_ai", "mistral/mistral-large"),
            ("x_ai", "xai/grok-2"),
            ("ollama", "ollama/llama3"),
            ("_OTHER", "gpt-4o-mini"),
        ],
    )
    def test_from_the_litellm_prefix(self, expected: str, model: str) -> None:
        """A litellm model string's provider prefix, in the conventions' spelling."""
        assert expected == provider_name(LiteLLMModel(model))

    def test_a_scripted_model(self) -> None:
        """A ScriptedModel is its own provider, whatever it is called."""
        assert "scripted" == provider_name(ScriptedModel(name="openai/gpt-4o-mini"))


class TestHistograms:
    async def test_token_usage_by_token_type(self) -> None:
        """Each model call's input and output tokens, split by gen_ai.token.type."""
        otel = Otel()
        await tick_run(otel)
        common = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "scripted",
            "gen_ai.response.model": "scripted",
        }
        points = otel.points("gen_ai.client.token.usage")
        keys = {
            kind: tuple(sorted({**common, "gen_ai.token.type": kind}.items()))
            for kind in ("input", "output")
        }
        assert {keys["input"], keys["output"]} == set(points)
        assert (3, 30) == (points[keys["input"]].count, points[keys["input"]].sum)
        assert (3, 15) == (points[keys["output"]].count, points[keys["output"]].sum)
        assert TOKEN_BUCKETS == tuple(points[keys["input"]].explicit_bounds)
        assert "{token}" == otel.metric("gen_ai.client.token.usage").unit

    async def test_operation_duration(self) -> None:
        """One duration per model call, in seconds, with the advised buckets."""
        otel = Otel()
        await tick_run(otel)
        ((key, point),) = otel.points("gen_ai.client.operation.duration").items()
        assert {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "scripted",
            "gen_ai.response.model": "scripted",
        } == dict(key)
        assert 3 == point.count
        assert 0 <= point.sum < 60
        assert DURATION_BUCKETS == tuple(point.explicit_bounds)
        assert "s" == otel.metric("gen_ai.client.operation.duration").unit

    async def test_our_counters_stay(self) -> None:
        """Turns, stops by reason and cost are still counted."""
        otel = Otel()
        await tick_run(otel)
        names = {"autonomous.turns", "autonomous.stops", "autonomous.tool_calls"}
        for name in names:
            assert otel.metric(name) is not None


# ---------------------------------------------------------------------------- content


async def marker_run(otel: Otel) -> None:
    """A run whose every prompt, instruction, argument, result and answer carries a marker."""
    model, tools = content_run()
    build = builder(model, tools=tools, instructions="INSTRUCTIONS-MARKER-10")
    await run_autonomous(
        build, "GOAL-MARKER-1", outcomes=("resolved", "escalate"), telemetry=otel.telemetry
    )


class TestContent:
    async def test_no_content_by_default(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """No span carries a prompt, instruction, argument, result or answer by default."""
        monkeypatch.delenv(CONTENT_VARIABLE, raising=False)
        otel = Otel()
        await marker_run(otel)
        assert otel.named("execute_tool echo")
        for span in otel.finished():
            assert [] == leaks(everything_on(span)), span.name

    async def test_the_variable_false_keeps_content_out(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false captures nothing."""
        monkeypatch.setenv(CONTENT_VARIABLE, "false")
        otel = Otel()
        await marker_run(otel)
        assert [] == [leaks(everything_on(s)) for s in otel.finished() if leaks(everything_on(s))]

    async def test_the_option_beats_the_variable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """capture_content=False keeps content out even when the variable says true."""
        monkeypatch.setenv(CONTENT_VARIABLE, "true")
        otel = Otel(capture_content=False)
        await marker_run(otel)
        assert [] == [leaks(everything_on(s)) for s in otel.finished() if leaks(everything_on(s))]

    async def test_the_variable_opts_in(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With the variable set to true, the chat spans carry the messages."""
        monkeypatch.setenv(CONTENT_VARIABLE, "True")
        otel = Otel()
        await marker_run(otel)
        first = attributes(otel.named("chat scripted")[0])
        assert "GOAL-MARKER-1" in first["gen_ai.input.messages"]

    async def test_opted_in_content_is_where_the_conventions_say(self) -> None:
        """Messages on chat spans, arguments and results on execute_tool; none elsewhere."""
        otel = Otel(capture_content=True)
        await marker_run(otel)
        first = attributes(otel.named("chat scripted")[0])
        system = json.loads(first["gen_ai.system_instructions"])
        assert "INSTRUCTIONS-MARKER-10" in system[0]["content"]
        assert "text" == system[0]["type"]
        (user,) = json.loads(first["gen_ai.input.messages"])
        assert "user" == user["role"]
        assert "GOAL-MARKER-1" in user["parts"][0]["content"]
        (answer,) = json.loads(first["gen_ai.output.messages"])
        assert ("assistant", "tool_call") == (answer["role"], answer["finish_reason"])
        echo_call = answer["parts"][0]
        assert ("tool_call", "echo", {"text": "ARG-MARKER-2"}) == (
            echo_call["type"],
            echo_call["name"],
            echo_call["arguments"],
        )
        second = json.loads(attributes(otel.named("chat scripted")[1])["gen_ai.input.messages"])
        response = second[-1]["parts"][-1]
        assert ("tool", "tool_call_response") == (second[-1]["role"], response["type"])
        (echo,) = otel.named("execute_tool echo")
        assert "ARG-MARKER-2" in attributes(echo)["gen_ai.tool.call.arguments"]
        assert "RESULT-MARKER-3" in attributes(echo)["gen_ai.tool.call.result"]
        for span in otel.named("invoke_agent agent") + otel.named("autonomous.turn"):
            assert [] == leaks(everything_on(span)), span.name

    def test_the_option_is_read_at_creation(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """capture_content shows what the instance decided."""
        monkeypatch.setenv(CONTENT_VARIABLE, "true")
        assert (True, False) == (
            Telemetry.create(capture_content=None).capture_content,
            Telemetry.create(capture_content=False).capture_content,
        )
