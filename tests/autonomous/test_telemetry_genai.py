"""Telemetry after the OpenTelemetry GenAI semantic conventions: span names, attributes, kinds,
histograms, opt-in content, and the trace context handed to MCP requests."""

from __future__ import annotations

import re

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from autonomous._telemetry import trace_context

pytestmark = pytest.mark.otel

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
