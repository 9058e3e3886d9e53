"""Telemetry: OpenTelemetry spans and counters with the SDK's in-memory exporters, and none
without opentelemetry installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from opentelemetry.trace import StatusCode

from autonomous import ModelResponse
from autonomous._observe._telemetry import Telemetry
from usage import Usage

from ..support.otel import Otel


@pytest.fixture
def otel() -> Iterator[Otel]:
    """Fresh in-memory exporters for one test."""
    yield Otel()


MODEL = "openai/gpt-4o-mini"
ANSWER = ModelResponse(usage=Usage(120, 30), model="gpt-4o-mini-2024-07-18")


def run_one_turn(telemetry: Telemetry) -> None:
    """A run of one turn with one model call and one failing tool call."""
    run = telemetry.run_span("disk-1", "monitor", model=MODEL, provider="openai")
    with run, telemetry.turn_span(1):
        with telemetry.model_span(1, MODEL, provider="openai", conversation="disk-1") as chat:
            telemetry.set_response(chat, ANSWER, 0.002)
        with telemetry.tool_span(1, "check_disk", call_id="c1", conversation="disk-1") as span:
            telemetry.set_tool_outcome(span, "error")


class TestSpans:
    def test_enabled_with_opentelemetry_installed(self, otel: Otel) -> None:
        """create() with providers gives an enabled instance."""
        assert True is otel.telemetry.enabled

    def test_spans_nest_run_turn_call(self, otel: Otel) -> None:
        """Model and tool spans are children of the turn span, itself a child of the run."""
        run_one_turn(otel.telemetry)
        spans = otel.by_name()
        run, turn = spans["invoke_agent monitor"], spans["autonomous.turn"]
        assert None is run.parent
        assert run.context is not None and turn.parent is not None
        assert run.context.span_id == turn.parent.span_id
        for name in ("chat openai/gpt-4o-mini", "execute_tool check_disk"):
            parent = spans[name].parent
            assert turn.context is not None and parent is not None
            assert turn.context.span_id == parent.span_id

    def test_spans_carry_names_and_numbers(self, otel: Otel) -> None:
        """Each span has exactly its documented attributes."""
        run_one_turn(otel.telemetry)
        spans = otel.by_name()
        assert {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "openai",
            "gen_ai.agent.name": "monitor",
            "gen_ai.conversation.id": "disk-1",
            "gen_ai.request.model": MODEL,
        } == dict(spans["invoke_agent monitor"].attributes or {})
        assert {"autonomous.turn": 1} == dict(spans["autonomous.turn"].attributes or {})
        assert {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": MODEL,
            "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
            "gen_ai.conversation.id": "disk-1",
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 30,
            "autonomous.turn": 1,
            "autonomous.cost_usd": 0.002,
        } == dict(spans["chat openai/gpt-4o-mini"].attributes or {})
        assert {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "check_disk",
            "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": "disk-1",
            "autonomous.turn": 1,
            "autonomous.tool_outcome": "error",
            "error.type": "error",
        } == dict(spans["execute_tool check_disk"].attributes or {})

    def test_failed_tool_outcome_marks_the_span(self, otel: Otel) -> None:
        """A tool error sets an ERROR status; an ok tool call leaves it unset."""
        with otel.telemetry.tool_span(1, "a") as span:
            otel.telemetry.set_tool_outcome(span, "timeout")
        with otel.telemetry.tool_span(1, "b") as span:
            otel.telemetry.set_tool_outcome(span, "ok")
        spans = otel.spans.get_finished_spans()
        assert [StatusCode.ERROR, StatusCode.UNSET] == [s.status.status_code for s in spans]

    def test_an_exception_is_recorded_by_type_name_only(self, otel: Otel) -> None:
        """The span names the error type; its message appears nowhere on the span."""
        with pytest.raises(ValueError, match="secret"), otel.telemetry.turn_span(2):
            raise ValueError("secret prompt text")
        (span,) = otel.spans.get_finished_spans()
        assert (StatusCode.ERROR, "ValueError") == (
            span.status.status_code,
            span.status.description,
        )
        assert "ValueError" == (span.attributes or {})["error.type"]
        assert () == tuple(span.events)
        assert "secret" not in span.to_json()


class TestCounters:
    def test_counts_turns_tools_tokens_cost_and_stops(self, otel: Otel) -> None:
        """Each counter adds up what it was given, split by its attributes."""
        t = otel.telemetry
        t.count_turn()
        t.count_turn()
        t.count_tool("check_disk", "ok")
        t.count_tool("check_disk", "ok")
        t.count_tool("check_disk", "error")
        t.count_tokens(100, 20)
        t.count_tokens(50, 0)
        t.count_cost(0.25)
        t.count_cost(0.5)
        t.count_stop("completed")
        counters = otel.counters()
        assert {(): 2} == counters["autonomous.turns"]
        assert {
            (("outcome", "ok"), ("tool", "check_disk")): 2,
            (("outcome", "error"), ("tool", "check_disk")): 1,
        } == counters["autonomous.tool_calls"]
        assert {
            (("direction", "input"),): 150,
            (("direction", "output"),): 20,
        } == counters["autonomous.tokens"]
        assert {(): 0.75} == counters["autonomous.cost_usd"]
        assert {(("reason", "completed"),): 1} == counters["autonomous.stops"]


class TestDisabled:
    def test_disabled_instance_records_nothing(self) -> None:
        """Every helper works on a disabled instance and yields no span."""
        telemetry = Telemetry.disabled()
        with telemetry.run_span("s", "a") as run, telemetry.turn_span(1) as turn:
            with telemetry.model_span(1, "m") as model:
                telemetry.set_response(model, ANSWER, 0.1)
            with telemetry.tool_span(1, "t") as tool:
                telemetry.set_tool_outcome(tool, "error")
        telemetry.count_turn()
        telemetry.count_tool("t", "ok")
        telemetry.count_tokens(1, 2)
        telemetry.count_cost(0.1)
        telemetry.count_stop("completed")
        assert (False, None, None, None, None) == (telemetry.enabled, run, turn, model, tool)

    def test_without_opentelemetry_create_is_a_no_op(self) -> None:
        """With opentelemetry unimportable, create() gives a disabled instance that works."""
        script = textwrap.dedent(
            """
            import sys
            sys.modules["opentelemetry"] = None
            from autonomous._observe._telemetry import Telemetry
            t = Telemetry.create()
            from autonomous import ModelResponse
            with t.run_span("s", "a"), t.turn_span(1), t.model_span(1, "m") as span:
                t.set_response(span, ModelResponse(), 0.1)
            with t.tool_span(1, "x") as span:
                t.set_tool_outcome(span, "error")
            t.count_turn(); t.count_tool("x", "ok"); t.count_tokens(1, 1)
            t.count_cost(0.1); t.count_stop("completed")
            assert not t.enabled
            assert not any(m.startswith("opentelemetry.") for m in sys.modules), "imported"
            print("no-op ok")
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
        )
        assert (0, "no-op ok") == (done.returncode, done.stdout.strip()), done.stderr
