"""OpenTelemetry spans and counters for runs, turns, model and tool calls; nothing without it.

``Telemetry.create()`` imports ``opentelemetry`` (the optional ``otel`` extra) when it can and
returns a no-op instance otherwise. The no-op path is one flag check per call and hands out a
shared :func:`contextlib.nullcontext`; the run's :class:`~autonomous._observer.Observer` is the
one caller inside the driver.

Spans (nested by the current-span context): ``autonomous.run`` > ``autonomous.turn`` >
``autonomous.model_call`` / ``autonomous.tool_call``. They carry names and numbers only, never a
prompt, an argument, a result or an error message: a span that ends by an exception gets its
type name as ``error.type`` and an ERROR status whose description is that type name.

Counters (meter ``autonomous``): ``autonomous.turns``, ``autonomous.tool_calls`` (``tool``,
``outcome``), ``autonomous.tokens`` (``direction`` = input | output), ``autonomous.cost_usd``
and ``autonomous.stops`` (``reason``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Meter, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["Telemetry", "trace_context"]

_NAME = "autonomous"
#: Handed out by every span helper of a disabled Telemetry: reusable, yields None.
_NO_SPAN: AbstractContextManager[None] = contextlib.nullcontext()
#: Tool outcomes that mark a tool span as failed.
_FAILED_TOOL_OUTCOMES = frozenset({"error", "timeout"})
_INPUT = {"direction": "input"}
_OUTPUT = {"direction": "output"}


@attrs.frozen
class _Counters:
    """The five counters of an enabled Telemetry."""

    turns: Counter
    tool_calls: Counter
    tokens: Counter
    cost: Counter
    stops: Counter

    @classmethod
    def create(cls, meter: Meter) -> _Counters:
        """The counters, made on ``meter``."""
        counter = meter.create_counter
        return cls(
            turns=counter("autonomous.turns", unit="{turn}", description="Turns executed"),
            tool_calls=counter(
                "autonomous.tool_calls",
                unit="{call}",
                description="Tool calls, by tool and outcome",
            ),
            tokens=counter(
                "autonomous.tokens", unit="{token}", description="Model tokens, by direction"
            ),
            cost=counter("autonomous.cost_usd", unit="USD", description="Model cost in USD"),
            stops=counter("autonomous.stops", unit="{run}", description="Runs ended, by reason"),
        )


@attrs.define(eq=False)
class Telemetry:
    """The run's OpenTelemetry instruments, or nothing when ``enabled`` is False.

    Build one with :meth:`create` (or :meth:`disabled`); ``Telemetry(tracer, meter)`` is
    enabled when both are given. Span helpers are context managers that yield the span
    (``None`` when disabled); pass it to :meth:`set_usage` or :meth:`set_tool_outcome`, which
    accept ``None`` and then do nothing.
    """

    _tracer: Tracer | None = None
    _meter: Meter | None = attrs.field(default=None, repr=False)
    #: Whether spans and counters are recorded.
    enabled: bool = attrs.field(init=False)
    _counters: _Counters | None = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self._tracer is not None and self._meter is not None:
            self.enabled, self._counters = True, _Counters.create(self._meter)
        else:
            self.enabled, self._counters = False, None

    @classmethod
    def create(
        cls,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> Telemetry:
        """Instruments from the given providers (default: the global ones), or a no-op
        instance when ``opentelemetry-api`` is not installed."""
        try:
            from opentelemetry import metrics, trace
        except ImportError:
            return cls.disabled()
        return cls(
            trace.get_tracer(_NAME, tracer_provider=tracer_provider),
            metrics.get_meter(_NAME, meter_provider=meter_provider),
        )

    @classmethod
    def disabled(cls) -> Telemetry:
        """An instance that records nothing and costs next to nothing."""
        return cls()

    # ----------------------------------------------------------------------- spans

    def run_span(self, session: str, agent: str) -> AbstractContextManager[Span | None]:
        """The span of a whole run (``autonomous.session``, ``autonomous.agent``)."""
        if not self.enabled:
            return _NO_SPAN
        return self._span(
            "autonomous.run", {"autonomous.session": session, "autonomous.agent": agent}
        )

    def turn_span(self, turn: int) -> AbstractContextManager[Span | None]:
        """The span of one turn (``autonomous.turn``)."""
        if not self.enabled:
            return _NO_SPAN
        return self._span("autonomous.turn", {"autonomous.turn": turn})

    def model_span(self, turn: int, model: str) -> AbstractContextManager[Span | None]:
        """The span of one model call; add its usage with :meth:`set_usage`."""
        if not self.enabled:
            return _NO_SPAN
        attributes = {
            "autonomous.turn": turn,
            "autonomous.model": model,
            "gen_ai.request.model": model,
        }
        return self._span("autonomous.model_call", attributes)

    def tool_span(self, turn: int, tool: str) -> AbstractContextManager[Span | None]:
        """The span of one tool call; add its outcome with :meth:`set_tool_outcome`."""
        if not self.enabled:
            return _NO_SPAN
        return self._span(
            "autonomous.tool_call", {"autonomous.turn": turn, "autonomous.tool": tool}
        )

    def set_usage(
        self, span: Span | None, input_tokens: int, output_tokens: int, cost_usd: float
    ) -> None:
        """Put a model call's token counts and cost on its span."""
        if span is None:
            return
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        span.set_attribute("autonomous.cost_usd", cost_usd)

    def set_tool_outcome(self, span: Span | None, outcome: str) -> None:
        """Put a tool call's outcome on its span; ``error`` and ``timeout`` mark it failed."""
        if span is None:
            return
        span.set_attribute("autonomous.tool_outcome", outcome)
        if outcome in _FAILED_TOOL_OUTCOMES:
            _mark_failed(span, outcome)

    @contextlib.contextmanager
    def _span(self, name: str, attributes: dict[str, Any]) -> Iterator[Span]:
        """A current span that records an exception by its type name only."""
        assert self._tracer is not None
        with self._tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield span
            except Exception as exc:  # cancellation passes untouched: it is no failure
                _mark_failed(span, type(exc).__name__)
                raise

    # ----------------------------------------------------------------------- counters

    def count_turn(self) -> None:
        """One more turn executed."""
        if self._counters is not None:
            self._counters.turns.add(1)

    def count_tool(self, tool: str, outcome: str) -> None:
        """One more call of ``tool`` that ended with ``outcome``."""
        if self._counters is not None:
            self._counters.tool_calls.add(1, {"tool": tool, "outcome": outcome})

    def count_tokens(self, input_tokens: int, output_tokens: int) -> None:
        """Tokens of one model call, by direction."""
        if self._counters is not None:
            if input_tokens > 0:
                self._counters.tokens.add(input_tokens, _INPUT)
            if output_tokens > 0:
                self._counters.tokens.add(output_tokens, _OUTPUT)

    def count_cost(self, usd: float) -> None:
        """Dollars of one model call."""
        if self._counters is not None and usd > 0:
            self._counters.cost.add(usd)

    def count_stop(self, reason: str) -> None:
        """One more run ended with ``reason``."""
        if self._counters is not None:
            self._counters.stops.add(1, {"reason": str(reason)})


def trace_context() -> dict[str, str]:
    """The current span's context as W3C trace-context headers, ``{}`` when there is none.

    Used to put the trace context into an MCP request's ``_meta``, so that a traced MCP server
    joins the run's trace. The headers come from :func:`opentelemetry.propagate.inject` (the
    configured propagators, by default ``traceparent``, ``tracestate`` when the context has one,
    and ``baggage`` when some is set); without ``opentelemetry-api`` installed, or when no span
    is recording, the answer is ``{}``.
    """
    try:
        from opentelemetry import propagate, trace
    except ImportError:
        return {}
    if not trace.get_current_span().is_recording():
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def _mark_failed(span: Span, kind: str) -> None:
    """Mark ``span`` failed, naming only the kind of failure (never a message)."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, kind))
