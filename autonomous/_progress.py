"""Typed, content-free progress events and their fan-out to a callback and to stream readers."""

from __future__ import annotations

import inspect
import math
from collections.abc import AsyncIterator, Callable
from datetime import datetime

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._logging import get_logger

_log = get_logger("autonomous.progress")


@attrs.frozen
class TurnStarted:
    """A turn began (after budgets, hooks and pause)."""

    turn: int
    attempt: int = 1


@attrs.frozen
class TurnFinished:
    """A turn ended; ``error`` is the error's type name, never its text."""

    turn: int
    model_calls: int
    error: str | None = None


@attrs.frozen
class ModelCalling:
    """A model call begins (its answer comes as :class:`ModelCalled`)."""

    turn: int
    model: str


@attrs.frozen
class ModelCalled:
    """One model call finished, with its usage and cost."""

    turn: int
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    tool_calls: int


@attrs.frozen
class HistorySummarized:
    """The summary model summarised the turns a history window cut before turn ``turn``
    (``first_turn`` to ``last_turn``, an earlier summary folded in), in one call that follows
    a :class:`ModelCalling` of that model; its usage and cost count in the run's totals as a
    :class:`ModelCalled`'s do."""

    turn: int
    model: str
    first_turn: int
    last_turn: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


@attrs.frozen
class ToolCalling:
    """A tool call begins (its outcome comes as :class:`ToolCalled`)."""

    turn: int
    tool: str


@attrs.frozen
class ToolCalled:
    """One tool call finished; ``outcome`` is ok, error, timeout, denied or rejected."""

    turn: int
    tool: str
    outcome: str


@attrs.frozen
class CheckpointWritten:
    """A checkpoint reached the event log."""

    turn: int
    stop_reason: str | None


@attrs.frozen
class Paused:
    """The loop parked at a turn boundary."""

    turn: int


@attrs.frozen
class Resumed:
    """The loop left a pause."""

    turn: int


@attrs.frozen
class Sleeping:
    """A scheduled wait begins, until ``until`` (UTC) at the latest: an inject or a wake
    request ends it sooner, and a scheduler that exits on a schedule ends the run deferred
    instead (then :class:`RunExited` follows)."""

    turn: int
    until: datetime


@attrs.frozen
class Woke:
    """A scheduled wait ended (time reached, an inject, or a wake request)."""

    turn: int


@attrs.frozen
class RunExited:
    """The run ended with ``reason``."""

    turn: int
    reason: str


ProgressEvent = (
    TurnStarted
    | TurnFinished
    | ModelCalling
    | ModelCalled
    | HistorySummarized
    | ToolCalling
    | ToolCalled
    | CheckpointWritten
    | Paused
    | Resumed
    | Sleeping
    | Woke
    | RunExited
)


#: The ``progress`` option: ``(turn, event) -> None``, sync or async (an awaitable it returns
#: is awaited; any other value is ignored).
ProgressCallback = Callable[[int, ProgressEvent], object]


@attrs.define(eq=False)
class ProgressHub:
    """Delivers progress events to the ``progress`` callback and to every stream reader.

    A reader that falls behind loses events (its buffer is bounded) rather than slowing the
    loop; a reader that went away is dropped; a failing callback is logged and ignored.
    """

    _callback: ProgressCallback | None = None
    _buffer: int = attrs.field(default=256, kw_only=True)
    _readers: list[MemoryObjectSendStream[ProgressEvent]] = attrs.field(factory=list, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    @property
    def readers(self) -> int:
        """How many stream readers are subscribed (one that left is dropped at the next
        event)."""
        return len(self._readers)

    async def emit(self, turn: int, event: ProgressEvent) -> None:
        """Hand ``event`` to every consumer without letting any of them break the loop."""
        if self._callback is not None:
            try:
                outcome = self._callback(turn, event)
                if inspect.isawaitable(outcome):
                    await outcome
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                _log.warning("progress_callback_failed", error=type(exc).__name__)
        self._send(event)

    def _send(self, event: ProgressEvent) -> None:
        alive = []
        for stream in self._readers:
            try:
                stream.send_nowait(event)
            except anyio.WouldBlock:
                alive.append(stream)  # slow reader: it misses this event, stays subscribed
                continue
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                stream.close()  # the reader left: drop our end too (unclosed, it warns)
                continue
            alive.append(stream)
        self._readers = alive

    def subscribe(self) -> AsyncIterator[ProgressEvent]:
        """A new stream of the events emitted from now on; it ends when the run ends."""
        send, receive = anyio.create_memory_object_stream[ProgressEvent](
            self._buffer if self._buffer > 0 else math.inf
        )
        if self._closed:
            send.close()
        else:
            self._readers.append(send)
        return _Reader(receive)

    def close(self) -> None:
        """End every reader's stream (the run is over)."""
        self._closed = True
        for stream in self._readers:
            stream.close()
        self._readers = []


@attrs.define(eq=False)
class _Reader:
    """One reader's stream; closing it, finishing it or dropping it unread unsubscribes it
    (the hub drops a reader whose stream is closed at its next event)."""

    _receive: MemoryObjectReceiveStream[ProgressEvent]

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> ProgressEvent:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._receive.close()
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop reading: the hub drops this reader at its next event."""
        self._receive.close()

    def __del__(self) -> None:
        self._receive.close()
