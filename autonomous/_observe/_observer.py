"""One observer per run: a site reports an event once, with ``emit``; the fan-out lives here.

The sinks (structlog's processors and OpenTelemetry's span processors are the model):

    log        structlog, the operational log: every event, at once, under its stable name
    telemetry  OpenTelemetry spans and counters (:class:`Telemetry`; a no-op one when off)
    recent     the supervisor's window (:class:`RecentEvents`), when a supervisor is set
    hub        the ``progress`` callback and the handle's stream readers (:class:`ProgressHub`)

Every event is built and fanned out whoever listens: a few microseconds against a model call
are not worth a branch at every site. Spans are context managers; what belongs on a span while
it is open (a model call's usage, a tool call's outcome) is a plain method called inside it.

The commit rule
---------------
A run commits to its log once per model call: the call's answer together with everything
recorded since the last commit (the turn's prompt, the previous call's tool results, permission
decisions), before any of the answer's tool calls runs, so that what a call spent is durable
before anything else happens. A turn's last answer has no tool call to run: it goes into the
log with the checkpoint that follows the turn (the run's final checkpoint when the run ends
after it), in the same commit. Who listens changes none of this: with a progress callback, a
stream reader, a supervisor or telemetry, a run commits the same events at the same points.

Listeners (the progress consumers and the supervisor's window) hear of an answer only once the
log has it. The turn's last answer, left for the checkpoint, is held (:meth:`Observer.hold`):
it and every event emitted after it wait, in order, until the checkpoint is committed, which
:class:`CheckpointWritten` reports (it is emitted right after the commit). Events of work
under way go out as they happen: a turn, a model call or a tool call beginning, and a tool
call's outcome (its result goes into the log with the next answer, so a crash before that
leaves the call to be answered as interrupted on resume). When the run ends without writing
the checkpoint that was held for (a lost lease, a store that failed), what was held is
dropped, since the log does not have it, and :class:`RunExited` goes out alone. The
operational log and telemetry are told at once: they report what the process did, not what
the session holds.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import attrs
from structlog.typing import FilteringBoundLogger

from .._logging import get_logger
from .._progress import (
    CheckpointWritten,
    HistorySummarized,
    ModelCalled,
    ModelCalling,
    Paused,
    ProgressCallback,
    ProgressEvent,
    ProgressHub,
    Resumed,
    RunExited,
    Sleeping,
    ToolCalled,
    ToolCalling,
    TurnFinished,
    TurnStarted,
)
from .._tools._tool_result import ToolOutcome
from ._supervisor import RecentEvents
from ._telemetry import ChatSpan, Telemetry, provider_name

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence

    from opentelemetry.trace import Span

    from .._model import Message, Model, ModelResponse, ToolCall

__all__ = ["Observer"]

_log: FilteringBoundLogger = get_logger("autonomous")

#: Events the supervisor's window leaves out: it looks at turn boundaries, where every call
#: that began has ended, and a call's start would only crowd older events out of it.
_STARTS = (ModelCalling, ToolCalling)


def _log_line(event: ProgressEvent) -> tuple[str, dict[str, Any]] | None:
    """The operational log's line for ``event``: its stable name and fields; ``None`` for the
    events it leaves out (a call's start, whose end it logs; a checkpoint; a wake)."""
    match event:
        case TurnStarted():
            return "turn_started", {"turn": event.turn}
        case TurnFinished():
            return "turn_finished", {"turn": event.turn, "ok": event.error is None}
        case ModelCalled():
            return "model_call", {
                "turn": event.turn,
                "model": event.model,
                "input_tokens": event.input_tokens,
                "output_tokens": event.output_tokens,
                "cost_usd": event.cost_usd,
                "tool_calls": event.tool_calls,
            }
        case HistorySummarized():
            return "history_summarized", {
                "turn": event.turn,
                "first_turn": event.first_turn,
                "last_turn": event.last_turn,
                "input_tokens": event.input_tokens,
                "output_tokens": event.output_tokens,
                "cost_usd": event.cost_usd,
            }
        case ToolCalled():
            return "tool_call", {"turn": event.turn, "tool": event.tool, "outcome": event.outcome}
        case Paused():
            return "paused", {"turn": event.turn}
        case Resumed():
            return "resumed", {"turn": event.turn}
        case Sleeping():
            return "sleeping", {"turn": event.turn, "until": event.until.isoformat()}
        case RunExited():
            return "run_finished", {"reason": event.reason, "turns": event.turn}
    return None


@attrs.define(eq=False)
class Observer:
    """Reports a run's events to its log, telemetry, supervisor window and progress consumers."""

    log: FilteringBoundLogger = _log
    hub: ProgressHub = attrs.field(factory=ProgressHub)
    recent: RecentEvents | None = None
    telemetry: Telemetry = attrs.field(factory=Telemetry.disabled)
    #: The session key text, once the run span opened: ``gen_ai.conversation.id`` of its calls.
    _conversation: str = attrs.field(init=False, default="")
    #: Events waiting for the commit of an answer (None: nothing waits); see the module doc.
    _held: list[ProgressEvent] | None = attrs.field(init=False, default=None)

    @classmethod
    def for_run(
        cls,
        *,
        progress: ProgressCallback | None,
        supervised: bool,
        telemetry: Telemetry,
        log: FilteringBoundLogger = _log,
    ) -> Observer:
        """The observer of a new run: a window for its supervisor when it has one."""
        return cls(
            log=log,
            hub=ProgressHub(progress),
            recent=RecentEvents() if supervised else None,
            telemetry=telemetry,
        )

    def bind(self, **fields: Any) -> None:
        """Bind ``fields`` (session, agent) to every log line from now on."""
        self.log = self.log.bind(**fields)

    # ---- events ------------------------------------------------------------------------

    async def emit(self, event: ProgressEvent, **fields: Any) -> None:
        """Report ``event``: log it (with ``fields`` besides its own), then hand it to the
        supervisor's window and the progress consumers, now or, while an answer is held,
        once the checkpoint that commits it is written (see the module docstring)."""
        line = _log_line(event)
        if line is not None:
            name, own = line
            self.log.info(name, **own, **fields)
        if isinstance(event, RunExited):
            self._held = None  # the checkpoint they waited for was never written
        elif self._held is not None and not isinstance(event, CheckpointWritten):
            self._held.append(event)
            return
        held, self._held = self._held or (), None
        for waiting in (*held, event):
            await self._deliver(waiting)

    def hold(self) -> None:
        """The log has an answer that is not committed yet (a turn's last, left for the
        checkpoint after the turn): listeners hear of it and of what follows it once the
        checkpoint is written."""
        if self._held is None:
            self._held = []

    async def _deliver(self, event: ProgressEvent) -> None:
        """Hand ``event`` to the supervisor's window, then to the progress consumers."""
        if self.recent is not None and not isinstance(event, _STARTS):
            self.recent.record(event)
        await self.hub.emit(event.turn, event)

    def run_started(self, max_turns: int) -> None:
        """The loop begins (logged only)."""
        self.log.info("run_started", max_turns=max_turns)

    def count_stop(self, reason: str) -> None:
        """The run stops with ``reason``: counted as soon as the reason is known, before the
        final checkpoint (which may yet turn it into ``lease_lost``)."""
        self.telemetry.count_stop(reason)

    # ---- the stream readers ------------------------------------------------------------

    def subscribe(self) -> AsyncIterator[ProgressEvent]:
        """A new stream of the progress events from now on; it ends when the run ends."""
        return self.hub.subscribe()

    def close(self) -> None:
        """End every reader's stream (the run is over)."""
        self.hub.close()

    # ---- spans -------------------------------------------------------------------------

    def run_span(
        self, session: str, agent: str, model: Model
    ) -> AbstractContextManager[Span | None]:
        """The span of the whole run of ``agent`` on ``model``, in session ``session`` (the
        conversation its model and tool calls belong to)."""
        self._conversation = session
        return self.telemetry.run_span(
            session, agent, model=model.name, provider=provider_name(model)
        )

    @contextmanager
    def turn_span(self, turn: int) -> Iterator[Span | None]:
        """The span of one turn, counted as one more turn."""
        with self.telemetry.turn_span(turn) as span:
            self.telemetry.count_turn()
            yield span

    def model_span(
        self, turn: int, model: Model, messages: Sequence[Message]
    ) -> AbstractContextManager[ChatSpan | None]:
        """The span of one call of ``model`` on ``messages``; put its answer on it with
        :meth:`model_usage`."""
        return self.telemetry.model_span(
            turn,
            model.name,
            provider=provider_name(model),
            conversation=self._conversation,
            messages=messages,
        )

    def model_usage(self, span: ChatSpan | None, response: ModelResponse, cost_usd: float) -> None:
        """A model call's answer, tokens and cost: on its (open) span, and counted."""
        usage = response.usage
        self.telemetry.set_response(span, response, cost_usd)
        self.telemetry.count_tokens(usage.input_tokens, usage.output_tokens)
        self.telemetry.count_cost(cost_usd)

    def tool_span(self, turn: int, call: ToolCall) -> AbstractContextManager[Span | None]:
        """The span of one tool call; put its outcome on it with :meth:`tool_outcome`."""
        return self.telemetry.tool_span(
            turn,
            call.name,
            call_id=call.id,
            conversation=self._conversation,
            arguments=call.arguments,
        )

    def tool_outcome(self, span: Span | None, tool: str, outcome: ToolOutcome, result: str) -> None:
        """A tool call's outcome and ``result`` (the answer the model gets): on its (open)
        span, and counted."""
        self.telemetry.set_tool_outcome(span, outcome, result)
        self.telemetry.count_tool(tool, outcome)
