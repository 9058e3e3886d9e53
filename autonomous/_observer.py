"""One observer per run: a site reports an event once; the fan-out to every sink lives here.

The sinks (structlog's processors and OpenTelemetry's span processors are the model):

    log        structlog, the operational log: every event, under its stable name
    recent     the supervisor's window (:class:`RecentEvents`), when a supervisor is set
    hub        the ``progress`` callback and the handle's stream readers (:class:`ProgressHub`)
    telemetry  OpenTelemetry spans and counters (:class:`Telemetry`), when configured

Each event kind is one method. A progress event is built only when someone takes it
(:attr:`Observer.listening`): with no callback, reader, supervisor or telemetry, an event costs
its one log call. Spans are context managers; what belongs on a span while it is open (a model
call's usage, a tool call's outcome) is a plain method called inside it.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs
from structlog.typing import FilteringBoundLogger

from usage import Usage

from ._logging import get_logger
from ._progress import (
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
    Woke,
)
from ._supervisor import RecentEvents, Spent
from ._telemetry import ChatSpan, Telemetry, provider_name
from ._tool_result import ToolOutcome

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence

    from opentelemetry.trace import Span

    from eventlog import HistorySummary

    from ._model import Message, Model, ModelResponse, ToolCall

__all__ = ["Observer"]

_log: FilteringBoundLogger = get_logger("autonomous")


def _info_enabled(log: FilteringBoundLogger) -> bool:
    """Whether ``log`` keeps info events. Skipping a filtered-out call outright saves building
    its keywords, which costs more than a scripted model call; a logger that cannot tell (a
    stdlib-style one configured by a program) is asked every time."""
    enabled = getattr(log, "is_enabled_for", None)
    return bool(enabled(logging.INFO)) if enabled is not None else True


@attrs.define(eq=False)
class Observer:
    """Reports a run's events to its log, progress consumers, supervisor window and telemetry."""

    log: FilteringBoundLogger = _log
    hub: ProgressHub = attrs.field(factory=ProgressHub)
    recent: RecentEvents | None = None
    telemetry: Telemetry = attrs.field(factory=Telemetry.disabled)
    _info: bool = attrs.field(init=False)
    #: The session key text, once the run span opened: ``gen_ai.conversation.id`` of its calls.
    _conversation: str = attrs.field(init=False, default="")

    def __attrs_post_init__(self) -> None:
        self._info = _info_enabled(self.log)

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
        self._info = _info_enabled(self.log)

    @property
    def listening(self) -> bool:
        """Whether anyone besides the log takes progress events (then they are built)."""
        return self.recent is not None or self.hub.active

    async def _emit(self, turn: int, event: ProgressEvent) -> None:
        """Hand ``event`` to the supervisor's window, then to the progress consumers."""
        if self.recent is not None:
            self.recent.record(event)
        if self.hub.active:
            await self.hub.emit(turn, event)

    # ---- the stream readers ------------------------------------------------------------

    def subscribe(self) -> AsyncIterator[ProgressEvent]:
        """A new stream of the progress events from now on; it ends when the run ends."""
        return self.hub.subscribe()

    def close(self) -> None:
        """End every reader's stream (the run is over)."""
        self.hub.close()

    # ---- the run -----------------------------------------------------------------------

    def run_span(
        self, session: str, agent: str, model: Model
    ) -> AbstractContextManager[Span | None]:
        """The span of the whole run of ``agent`` on ``model``, in session ``session`` (the
        conversation its model and tool calls belong to)."""
        self._conversation = session
        telemetry = self.telemetry
        if not telemetry.enabled:
            return telemetry.run_span(session, agent)
        return telemetry.run_span(session, agent, model=model.name, provider=provider_name(model))

    def run_started(self, max_turns: int) -> None:
        """The loop begins (logged only)."""
        if self._info:
            self.log.info("run_started", max_turns=max_turns)

    def count_stop(self, reason: str) -> None:
        """The run stops with ``reason``: counted as soon as the reason is known, before the
        final checkpoint (which may yet turn it into ``lease_lost``)."""
        self.telemetry.count_stop(reason)

    async def run_exited(self, reason: str, spent: Spent) -> None:
        """The run ended with ``reason`` having spent ``spent``."""
        if self._info:
            self.log.info(
                "run_finished",
                reason=reason,
                turns=spent.turns,
                input_tokens=spent.input_tokens,
                output_tokens=spent.output_tokens,
                cost_usd=spent.cost_usd,
            )
        if self.listening:
            await self._emit(spent.turns, RunExited(spent.turns, reason))

    async def checkpoint_written(self, turns: int, stop_reason: str | None) -> None:
        """A checkpoint reached the event log after ``turns`` turns (not logged)."""
        if self.listening:
            await self._emit(turns, CheckpointWritten(turns, stop_reason))

    async def paused(self, turn: int) -> None:
        """The loop parked before ``turn``."""
        if self._info:
            self.log.info("paused", turn=turn)
        if self.listening:
            await self._emit(turn, Paused(turn))

    async def resumed(self, turn: int) -> None:
        """The loop left a pause before ``turn``."""
        if self._info:
            self.log.info("resumed", turn=turn)
        if self.listening:
            await self._emit(turn, Resumed(turn))

    async def sleeping(self, turn: int, until: datetime) -> None:
        """A scheduled wait after ``turn`` begins, until ``until`` at the latest."""
        if self._info:
            self.log.info("sleeping", turn=turn, until=until.isoformat())
        if self.listening:
            await self._emit(turn, Sleeping(turn, until))

    async def woke(self, turn: int) -> None:
        """A scheduled wait after ``turn`` ended (not logged)."""
        if self.listening:
            await self._emit(turn, Woke(turn))

    # ---- turns -------------------------------------------------------------------------

    @contextmanager
    def turn_span(self, turn: int) -> Iterator[Span | None]:
        """The span of one turn, counted as one more turn."""
        with self.telemetry.turn_span(turn) as span:
            self.telemetry.count_turn()
            yield span

    async def turn_started(self, turn: int, attempt: int, *, inbox: int, resumed: bool) -> None:
        """Attempt ``attempt`` of ``turn`` begins, with ``inbox`` messages in its prompt."""
        if self._info:
            self.log.info("turn_started", turn=turn, inbox=inbox, resumed=resumed)
        if self.listening:
            await self._emit(turn, TurnStarted(turn, attempt))

    async def turn_finished(self, turn: int, model_calls: int, error: str | None) -> None:
        """``turn`` ended after ``model_calls`` model calls; ``error`` is the type name of the
        error that failed it, ``None`` when it succeeded."""
        if self._info:
            self.log.info("turn_finished", turn=turn, ok=error is None)
        if self.listening:
            await self._emit(turn, TurnFinished(turn, model_calls, error))

    # ---- model and tool calls ----------------------------------------------------------

    async def model_calling(self, turn: int, model: str) -> None:
        """A model call of ``turn`` begins (not logged: its answer is).

        Only for the progress consumers: the supervisor looks at its window at turn
        boundaries, where every call that began has ended, and the start would only crowd out
        older events."""
        if self.hub.active:
            await self.hub.emit(turn, ModelCalling(turn, model))

    def model_span(
        self, turn: int, model: Model, messages: Sequence[Message]
    ) -> AbstractContextManager[ChatSpan | None]:
        """The span of one call of ``model`` on ``messages``; put its answer on it with
        :meth:`model_usage`."""
        telemetry = self.telemetry
        if not telemetry.enabled:
            return telemetry.model_span(turn, model.name)
        return telemetry.model_span(
            turn,
            model.name,
            provider=provider_name(model),
            conversation=self._conversation,
            messages=messages,
        )

    def model_usage(self, span: ChatSpan | None, response: ModelResponse, cost_usd: float) -> None:
        """A model call's answer, tokens and cost: on its (open) span, and counted."""
        telemetry = self.telemetry
        if telemetry.enabled:
            usage = response.usage
            telemetry.set_response(span, response, cost_usd)
            telemetry.count_tokens(usage.input_tokens, usage.output_tokens)
            telemetry.count_cost(cost_usd)

    async def model_called(
        self, turn: int, model: str, usage: Usage, cost_usd: float, *, tool_calls: int
    ) -> None:
        """A model call of ``turn`` answered, asking for ``tool_calls`` tool calls."""
        if self._info:
            self.log.info(
                "model_call",
                turn=turn,
                model=model,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cost_usd=cost_usd,
                tool_calls=tool_calls,
            )
        if self.listening:
            event = ModelCalled(
                turn, model, usage.input_tokens, usage.output_tokens, cost_usd, tool_calls
            )
            await self._emit(turn, event)

    async def history_summarized(self, summary: HistorySummary) -> None:
        """The summary model answered before turn ``summary.turn`` (see
        :class:`HistorySummarized`)."""
        turn = summary.turn
        self.log.info(
            "history_summarized",
            turn=turn,
            first_turn=summary.first_turn,
            last_turn=summary.last_turn,
            input_tokens=summary.input_tokens,
            output_tokens=summary.output_tokens,
            cost_usd=summary.cost_usd,
        )
        if self.listening:
            event = HistorySummarized(
                turn,
                summary.model,
                summary.first_turn,
                summary.last_turn,
                summary.input_tokens,
                summary.output_tokens,
                summary.cost_usd,
            )
            await self._emit(turn, event)

    async def tool_calling(self, turn: int, tool: str) -> None:
        """A call of ``tool`` in ``turn`` begins (not logged: its outcome is); only for the
        progress consumers, as :meth:`model_calling`."""
        if self.hub.active:
            await self.hub.emit(turn, ToolCalling(turn, tool))

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
        telemetry = self.telemetry
        if telemetry.enabled:
            telemetry.set_tool_outcome(span, outcome, result)
            telemetry.count_tool(tool, outcome)

    async def tool_called(self, turn: int, tool: str, outcome: ToolOutcome) -> None:
        """A call of ``tool`` in ``turn`` ended with ``outcome`` (ok, error, timeout, denied,
        rejected or interrupted)."""
        if self._info:
            self.log.info("tool_call", turn=turn, tool=tool, outcome=outcome)
        if self.listening:
            await self._emit(turn, ToolCalled(turn, tool, outcome))
