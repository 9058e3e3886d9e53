"""The run's conversation: each event it records applied to its history, committed in batches."""

from __future__ import annotations

import attrs

from eventlog import (
    AssistantMessage,
    Event,
    EventLog,
    Lease,
    Payload,
    SessionKey,
    ToolCallRecord,
    ToolResult,
    UserMessage,
)

from .._model import Message, ModelResponse
from .._tools._tool_result import ToolOutcome
from ._history import History, Window


@attrs.define(eq=False)
class Conversation:
    """The run's :class:`History`, grown by the events the run records, plus a buffer of
    those events not yet in the log.

    Every conversation event is built here, buffered and applied to the history: the one way
    the conversation grows, the way a resume rebuilds it. Events are flushed once per model
    call (the prompt, the previous call's tool results and the new answer in one commit), so
    the log costs one commit per call and a call's tokens are durable before its tools run.

    The messages are the system prompt (never changed), then the history's.
    """

    log: EventLog
    key: SessionKey
    system_prompt: str
    author: str
    #: Which turns are sent (the default: all of them).
    window: Window = attrs.field(factory=Window, kw_only=True)
    #: The conversation after the system prompt (a resume puts the one it folded here).
    history: History = attrs.field(init=False)
    #: The run's lease on the session, which fences every append (None: not leased).
    lease: Lease | None = attrs.field(default=None, init=False)
    _pending: list[Event] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        self.history = History(window=self.window)

    @property
    def messages(self) -> list[Message]:
        """What the next model call is sent."""
        system: list[Message] = (
            [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        )
        return [*system, *self.history.messages]

    def record(self, payload: Payload) -> None:
        """Buffer an event for the next flush, and apply it to the history."""
        event = Event.create(self.key, payload, author=self.author)
        self._pending.append(event)
        self.history.apply(event)

    async def flush(self) -> list[int]:
        """Append every buffered event in one batch, fenced by :attr:`lease` when the session
        is leased (the store refuses it with :class:`eventlog.LeaseLost` once another holder
        took the session over); their seqs."""
        if not self._pending:
            return []
        return await self.log.append(self.take_pending(), lease=self.lease)

    def take_pending(self) -> list[Event]:
        """The buffered events, handed over for appending (the buffer starts empty again)."""
        batch, self._pending = self._pending, []
        return batch

    def discard_pending(self) -> None:
        """Drop buffered events (a run that lost its lease writes nothing more)."""
        self._pending = []

    def begin_turn(self, prompt: str, turn: int, inbox_ids: tuple[str, ...] = ()) -> None:
        """Start a turn with ``prompt`` (cutting old turns: see :meth:`History.dropped_by` to
        summarise them first).

        ``inbox_ids`` names the inbox messages in the prompt: a resume that goes on with this
        turn knows that the model has seen them.
        """
        self.record(UserMessage(text=prompt, turn=turn, inbox_ids=inbox_ids))

    def answer_open_calls(self, content: str, turn: int) -> int:
        """Answer every open tool call of the current turn with ``content`` (outcome
        ``interrupted``), so that what the log closes is a conversation a provider accepts;
        how many there were."""
        open_turn = self.history.open_turn
        calls = open_turn.calls if open_turn is not None else ()
        for call in calls:
            self.add_tool_result(call.id, call.name, content, ToolOutcome.INTERRUPTED, turn)
        return len(calls)

    def add_answer(self, response: ModelResponse, turn: int, cost_usd: float) -> None:
        """Add the model's answer (its event carries the call's usage)."""
        u = response.usage
        self.record(
            AssistantMessage(
                text=response.text,
                turn=turn,
                tool_calls=tuple(
                    [ToolCallRecord(c.id, c.name, c.arguments) for c in response.tool_calls]
                ),
                model=response.model,
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cached_input_tokens=u.cached_input_tokens,
                cost_usd=cost_usd,
            )
        )

    def add_tool_result(
        self, call_id: str, name: str, content: str, outcome: ToolOutcome, turn: int
    ) -> None:
        """Add one tool result."""
        self.record(
            ToolResult(call_id=call_id, name=name, content=content, turn=turn, outcome=outcome)
        )
