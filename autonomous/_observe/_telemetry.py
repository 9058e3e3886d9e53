"""OpenTelemetry spans and metrics after the GenAI semantic conventions; nothing without it.

``Telemetry.create()`` imports ``opentelemetry`` (the optional ``otel`` extra) when it can and
returns a no-op instance otherwise. The no-op path is one flag check per call and hands out a
shared :func:`contextlib.nullcontext`; the run's :class:`~._observer.Observer` is the
one caller inside the driver.

Spans (nested by the current-span context), named as the GenAI conventions say:

    invoke_agent {agent}     INTERNAL  gen_ai.operation.name, .provider.name, .agent.name,
                                       .conversation.id (the session), .request.model
      autonomous.turn        INTERNAL  autonomous.turn
        chat {model}         CLIENT    gen_ai.operation.name, .provider.name, .request.model,
                                       .response.model, .conversation.id, .usage.input_tokens,
                                       .usage.output_tokens, .usage.cache_read.input_tokens and
                                       .usage.cache_creation.input_tokens (when not 0: part of
                                       the input); autonomous.turn, autonomous.cost_usd
        execute_tool {tool}  INTERNAL  gen_ai.operation.name, .tool.name, .tool.call.id,
                                       .tool.type, .conversation.id; autonomous.turn,
                                       autonomous.tool_outcome

They carry names and numbers only, never a prompt, an argument, a result or an error message,
unless content capture is on (``capture_content=True``, or the conventions' variable
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``): then a chat span also has
``gen_ai.system_instructions``, ``gen_ai.input.messages`` and ``gen_ai.output.messages``, and a
tool span ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``
(:mod:`._genai_content` shapes them). A span that ends by an exception gets its type
name as ``error.type`` and an ERROR status whose description is that type name; a tool call
that ended in ``error`` or ``timeout`` gets that outcome as its ``error.type``.

Metrics (meter ``autonomous``): the conventions' histograms ``gen_ai.client.token.usage``
(``{token}``, by ``gen_ai.token.type``) and ``gen_ai.client.operation.duration`` (``s``, with
``error.type`` for a failed call), one measurement per model call with the advised buckets; and
our counters ``autonomous.turns``, ``autonomous.tool_calls`` (``tool``, ``outcome``),
``autonomous.tokens`` (``direction`` = input | output), ``autonomous.cost_usd`` and
``autonomous.stops`` (``reason``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import attrs

from . import _genai_content as content

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from .._model import Message, Model, ModelResponse

__all__ = [
    "CONTENT_VARIABLE",
    "ChatSpan",
    "Telemetry",
    "auto_telemetry",
    "provider_name",
    "trace_context",
]

_NAME = "autonomous"
#: The conventions' switch for content capture (``true`` turns it on).
CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: Values of :data:`CONTENT_VARIABLE` that put content on spans (case-insensitive); the last
#: two are opentelemetry-python-contrib's newer spellings.
_CAPTURE_VALUES = frozenset({"true", "span_only", "span_and_event"})
#: Handed out by every span helper of a disabled Telemetry: reusable, yields None.
_NO_SPAN: AbstractContextManager[None] = contextlib.nullcontext()
#: Tool outcomes that mark a tool span as failed.
_FAILED_TOOL_OUTCOMES = frozenset({"error", "timeout"})
_INPUT = {"direction": "input"}
_OUTPUT = {"direction": "output"}
#: ``gen_ai.provider.name`` for a model without a provider prefix the conventions know.
OTHER_PROVIDER = "_OTHER"
#: litellm provider prefixes whose ``gen_ai.provider.name`` is spelled otherwise; any other
#: prefix is its own name (the conventions ask for a custom friendly name then).
_PROVIDERS = {
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "bedrock_converse": "aws.bedrock",
    "gemini": "gcp.gemini",
    "mistral": "mistral_ai",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
    "watsonx": "ibm.watsonx.ai",
    "xai": "x_ai",
}
#: The conventions' advised bucket boundaries (ExplicitBucketBoundaries).
_TOKEN_BUCKETS = [4**n for n in range(14)]
_DURATION_BUCKETS = [0.01 * 2**n for n in range(14)]


#: opentelemetry's OTEL_PYTHON_TRACER_PROVIDER: a provider for get_tracer_provider() to load.
_PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"
#: The API's modules a program imports to set a provider (auto_telemetry looks only then).
_OTEL_LOADED = frozenset({"opentelemetry.trace", "opentelemetry.metrics"})
#: The API's providers before a program configures one, and its no-op ones.
_UNCONFIGURED = frozenset(
    {"ProxyTracerProvider", "NoOpTracerProvider", "_ProxyMeterProvider", "NoOpMeterProvider"}
)


def provider_name(model: Model) -> str:
    """``gen_ai.provider.name`` for ``model``: its own ``provider`` attribute when it has one
    (:class:`~autonomous.testing.ScriptedModel`: ``scripted``), else the provider prefix of its
    litellm model string in the conventions' spelling (``openai/gpt-4o-mini``: ``openai``,
    ``bedrock/...``: ``aws.bedrock``), else ``_OTHER``."""
    provider = getattr(model, "provider", None)
    if isinstance(provider, str) and provider:
        return provider
    prefix, slash, _ = model.name.partition("/")
    if not (slash and prefix):
        return OTHER_PROVIDER
    return _PROVIDERS.get(prefix, prefix)


def capture_from_environment() -> bool:
    """Whether :data:`CONTENT_VARIABLE` turns content capture on."""
    return os.environ.get(CONTENT_VARIABLE, "").strip().lower() in _CAPTURE_VALUES


@attrs.frozen
class _Instruments:
    """The counters and histograms of an enabled Telemetry."""

    turns: Counter
    tool_calls: Counter
    tokens: Counter
    cost: Counter
    stops: Counter
    token_usage: Histogram
    duration: Histogram

    @classmethod
    def create(cls, meter: Meter) -> _Instruments:
        """The instruments, made on ``meter``."""
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
            token_usage=_histogram(
                meter,
                "gen_ai.client.token.usage",
                "{token}",
                "Number of input and output tokens used",
                _TOKEN_BUCKETS,
            ),
            duration=_histogram(
                meter,
                "gen_ai.client.operation.duration",
                "s",
                "GenAI operation duration",
                _DURATION_BUCKETS,
            ),
        )


def _histogram(
    meter: Meter, name: str, unit: str, description: str, buckets: Sequence[float]
) -> Histogram:
    """A histogram with the advised bucket boundaries (when the API takes the advice)."""
    try:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
        )
    except TypeError:  # opentelemetry-api before 1.23: no advisory parameter
        return meter.create_histogram(name, unit=unit, description=description)


@attrs.define(eq=False)
class ChatSpan:
    """An open model-call span and the attributes its measurements are recorded with."""

    #: The ``chat {model}`` span.
    span: Span
    #: ``gen_ai.operation.name``, ``.provider.name``, ``.request.model`` and, once the answer
    #: names it, ``.response.model``.
    metric_attributes: dict[str, str]


@attrs.define(eq=False)
class Telemetry:
    """The run's OpenTelemetry instruments, or nothing when ``enabled`` is False.

    Build one with :meth:`create` (or :meth:`disabled`) and pass it as a run's ``telemetry``
    option; ``Telemetry(tracer, meter)`` is enabled when both are given. Span helpers are
    context managers that yield the span (``None`` when disabled); pass it to
    :meth:`set_response` or :meth:`set_tool_outcome`, which accept ``None`` and then do
    nothing. ``capture_content`` puts message and tool content on the spans (off by default).
    """

    _tracer: Tracer | None = None
    _meter: Meter | None = attrs.field(default=None, repr=False)
    #: Whether prompts, answers, tool arguments and results go on the spans.
    capture_content: bool = False
    #: Whether spans and metrics are recorded.
    enabled: bool = attrs.field(init=False)
    _instruments: _Instruments | None = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self._tracer is not None and self._meter is not None:
            self.enabled, self._instruments = True, _Instruments.create(self._meter)
        else:
            self.enabled, self._instruments = False, None

    @classmethod
    def create(
        cls,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        capture_content: bool | None = None,
    ) -> Telemetry:
        """Instruments from the given providers (default: the global ones), or a no-op
        instance when ``opentelemetry-api`` is not installed.

        ``capture_content`` puts message and tool content on the spans; ``None`` (the
        default) reads :data:`CONTENT_VARIABLE` (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE
        _CONTENT=true`` turns it on), once, here.
        """
        try:
            from opentelemetry import metrics, trace
        except ImportError:
            return cls.disabled()
        if capture_content is None:
            capture_content = capture_from_environment()
        return cls(
            trace.get_tracer(_NAME, tracer_provider=tracer_provider),
            metrics.get_meter(_NAME, meter_provider=meter_provider),
            capture_content=capture_content,
        )

    @classmethod
    def disabled(cls) -> Telemetry:
        """An instance that records nothing and costs next to nothing."""
        return cls()

    # ----------------------------------------------------------------------- spans

    def run_span(
        self, session: str, agent: str, *, model: str = "", provider: str = ""
    ) -> AbstractContextManager[Span | None]:
        """The ``invoke_agent {agent}`` span of a whole run of session ``session``."""
        if not self.enabled:
            return _NO_SPAN
        attributes = {"gen_ai.operation.name": "invoke_agent"}
        if provider:
            attributes["gen_ai.provider.name"] = provider
        attributes |= {"gen_ai.agent.name": agent, "gen_ai.conversation.id": session}
        if model:
            attributes["gen_ai.request.model"] = model
        return self._span(f"invoke_agent {agent}", attributes)

    def turn_span(self, turn: int) -> AbstractContextManager[Span | None]:
        """The span of one turn (``autonomous.turn``)."""
        if not self.enabled:
            return _NO_SPAN
        return self._span("autonomous.turn", {"autonomous.turn": turn})

    def model_span(
        self,
        turn: int,
        model: str,
        *,
        provider: str = OTHER_PROVIDER,
        conversation: str = "",
        messages: Sequence[Message] = (),
    ) -> AbstractContextManager[ChatSpan | None]:
        """The ``chat {model}`` span of one model call on ``messages``, timed for
        ``gen_ai.client.operation.duration``; add its answer with :meth:`set_response`."""
        if not self.enabled:
            return _NO_SPAN
        metric = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
        attributes: dict[str, Any] = dict(metric)
        if conversation:
            attributes["gen_ai.conversation.id"] = conversation
        attributes["autonomous.turn"] = turn
        # Opt-in, content being private; off, no text of the conversation is serialised.
        if self.capture_content:
            system = content.system_instructions(messages)
            if system is not None:
                attributes["gen_ai.system_instructions"] = system
            attributes["gen_ai.input.messages"] = content.input_messages(messages)
        return self._chat(f"chat {model}", attributes, metric)

    def set_response(self, chat: ChatSpan | None, response: ModelResponse, cost_usd: float) -> None:
        """Put a model call's answer (response model, usage, cost; the answer itself when
        capturing content) on its span, and record its tokens."""
        if chat is None or self._instruments is None:
            return
        span, metric = chat.span, chat.metric_attributes
        if response.model:
            metric["gen_ai.response.model"] = response.model
            span.set_attribute("gen_ai.response.model", response.model)
        usage = response.usage
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        # Only when reported: most providers and every scripted answer have no cache at all.
        if usage.cached_input_tokens:
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens)
        if usage.cache_creation_input_tokens:
            span.set_attribute(
                "gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_input_tokens
            )
        span.set_attribute("autonomous.cost_usd", cost_usd)
        if self.capture_content:
            span.set_attribute("gen_ai.output.messages", content.output_messages(response))
        record = self._instruments.token_usage.record
        record(usage.input_tokens, {**metric, "gen_ai.token.type": "input"})
        record(usage.output_tokens, {**metric, "gen_ai.token.type": "output"})

    def tool_span(
        self,
        turn: int,
        tool: str,
        *,
        call_id: str = "",
        conversation: str = "",
        arguments: str | None = None,
    ) -> AbstractContextManager[Span | None]:
        """The ``execute_tool {tool}`` span of one tool call (``arguments``, its JSON text, go
        on it only when capturing content); add its outcome with :meth:`set_tool_outcome`."""
        if not self.enabled:
            return _NO_SPAN
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool"}
        attributes["gen_ai.tool.name"] = tool
        if call_id:
            attributes["gen_ai.tool.call.id"] = call_id
        attributes["gen_ai.tool.type"] = "function"
        if conversation:
            attributes["gen_ai.conversation.id"] = conversation
        attributes["autonomous.turn"] = turn
        if self.capture_content and arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = arguments
        return self._span(f"execute_tool {tool}", attributes)

    def set_tool_outcome(self, span: Span | None, outcome: str, result: str | None = None) -> None:
        """Put a tool call's outcome on its span (and ``result``, the answer the model gets,
        when capturing content); ``error`` and ``timeout`` mark it failed."""
        if span is None:
            return
        span.set_attribute("autonomous.tool_outcome", outcome)
        if self.capture_content and result is not None:
            span.set_attribute("gen_ai.tool.call.result", result)
        if outcome in _FAILED_TOOL_OUTCOMES:
            _mark_failed(span, outcome)

    @contextlib.contextmanager
    def _span(self, name: str, attributes: dict[str, Any], client: bool = False) -> Iterator[Span]:
        """A current span that records an exception by its type name only."""
        from opentelemetry.trace import SpanKind

        assert self._tracer is not None
        with self._tracer.start_as_current_span(
            name,
            kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except Exception as exc:  # cancellation passes untouched: it is no failure
                _mark_failed(span, type(exc).__name__)
                raise

    @contextlib.contextmanager
    def _chat(
        self, name: str, attributes: dict[str, Any], metric: dict[str, str]
    ) -> Iterator[ChatSpan]:
        """A CLIENT span whose duration is recorded when it ends (with ``error.type`` when it
        ends by an exception; not at all when cancelled)."""
        assert self._instruments is not None
        duration, started = self._instruments.duration, time.perf_counter()
        with self._span(name, attributes, client=True) as span:
            chat = ChatSpan(span, metric)
            try:
                yield chat
            except Exception as exc:
                failed = {**metric, "error.type": type(exc).__name__}
                duration.record(time.perf_counter() - started, failed)
                raise
            duration.record(time.perf_counter() - started, metric)

    # ----------------------------------------------------------------------- counters

    def count_turn(self) -> None:
        """One more turn executed."""
        if self._instruments is not None:
            self._instruments.turns.add(1)

    def count_tool(self, tool: str, outcome: str) -> None:
        """One more call of ``tool`` that ended with ``outcome``."""
        if self._instruments is not None:
            self._instruments.tool_calls.add(1, {"tool": tool, "outcome": outcome})

    def count_tokens(self, input_tokens: int, output_tokens: int) -> None:
        """Tokens of one model call, by direction."""
        if self._instruments is not None:
            if input_tokens > 0:
                self._instruments.tokens.add(input_tokens, _INPUT)
            if output_tokens > 0:
                self._instruments.tokens.add(output_tokens, _OUTPUT)

    def count_cost(self, usd: float) -> None:
        """Dollars of one model call."""
        if self._instruments is not None and usd > 0:
            self._instruments.cost.add(usd)

    def count_stop(self, reason: str) -> None:
        """One more run ended with ``reason``."""
        if self._instruments is not None:
            self._instruments.stops.add(1, {"reason": str(reason)})


_NO_TELEMETRY = Telemetry.disabled()


def auto_telemetry() -> Telemetry:
    """Instruments when the API is installed and a program configured an SDK provider (a
    tracer's, or a meter's); else off.

    With only the API installed every span would go to a no-op provider at a real cost per
    call, so the runtime stays off until a program configures a provider. A program sets one
    through ``opentelemetry.trace`` or ``opentelemetry.metrics`` (the ``autonomous`` command
    does, from the ``OTEL_*`` variables), or names a tracer provider in the environment (loaded
    by the look below), so while none is the case a run neither imports nor asks anything.
    """
    if not _OTEL_LOADED & sys.modules.keys() and _PROVIDER_VARIABLE not in os.environ:
        return _NO_TELEMETRY
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        return _NO_TELEMETRY
    providers = (trace.get_tracer_provider(), metrics.get_meter_provider())
    if all(type(p).__name__ in _UNCONFIGURED for p in providers):
        return _NO_TELEMETRY
    return Telemetry.create()


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
