"""The conversation the model sees and the events that record it, written in few commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from eventlog import (
    AssistantMessage,
    Event,
    EventKind,
    EventLog,
    Lease,
    Payload,
    SessionKey,
    ToolCallRecord,
    ToolResult,
    UserMessage,
)

from ._model import Message, ModelResponse
from ._results import ToolOutcome


@attrs.define(eq=False)
class Conversation:
    """The message list sent to the model, plus a buffer of events not yet in the log.

    Events are buffered and flushed once per model call (the prompt, the previous call's tool
    results and the new answer in one commit), so the log costs one commit per call and a
    call's tokens are durable before its tools run. A failed attempt is cut from the messages
    (its events stay in the log) so a retry starts from the same state.
    """

    log: EventLog
    key: SessionKey
    system_prompt: str
    author: str
    window: int = attrs.field(default=0, kw_only=True)
    messages: list[Message] = attrs.field(init=False)
    goal: str = attrs.field(default="", init=False)
    #: The run's lease on the session, which fences every append (None: not leased).
    lease: Lease | None = attrs.field(default=None, init=False)
    _base: int = attrs.field(init=False)
    _turn_start: int = attrs.field(init=False)
    _pending: list[Event] = attrs.field(factory=list, init=False)
    #: Where each kept turn begins in ``messages``.
    _starts: list[int] = attrs.field(factory=list, init=False)
    _trimmed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        prompt = self.system_prompt
        self.messages = [{"role": "system", "content": prompt}] if prompt else []
        self._base = self._turn_start = len(self.messages)

    def load(self, history: list[Message], *, unfinished: int = 0) -> None:
        """Put a resumed session's history (already windowed) after the system message.

        Its last ``unfinished`` messages are the committed prefix of a turn the resumed run
        goes on with: they are the current turn's (a failed attempt cuts them too).
        """
        self.messages[self._base :] = history
        self._starts = [i + self._base for i, m in enumerate(history) if m.get("role") == "user"]
        self._trim()
        self._turn_start = len(self.messages) - unfinished

    def _trim(self) -> None:
        """Keep only the newest ``window`` turns; the goal stays in the system message."""
        if not self.window or len(self._starts) < self.window:
            return
        cut = self._starts[-self.window + 1] if self.window > 1 else len(self.messages)
        removed = cut - self._base
        if removed <= 0:
            return
        del self.messages[self._base : cut]
        self._starts = [s - removed for s in self._starts if s >= cut]
        if not self._trimmed:
            self._trimmed = True
            self._pin_goal()

    def _pin_goal(self) -> None:
        note = f"[Goal of this run] {self.goal}" if self.goal else ""
        note += "\n[Context] Only the most recent turns are shown; earlier turns are in the log."
        text = f"{self.system_prompt}\n\n{note}" if self.system_prompt else note
        if self._base:
            self.messages[0] = {"role": "system", "content": text}
        else:
            self.messages.insert(0, {"role": "system", "content": text})
            self._base = 1
            self._starts = [s + 1 for s in self._starts]

    def record(self, payload: Payload) -> None:
        """Buffer an event for the next flush."""
        self._pending.append(Event.create(self.key, payload, author=self.author))

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
        """Start a turn: remember where it began and add its prompt (trimming old turns).

        ``inbox_ids`` names the inbox messages in the prompt: a resume that goes on with this
        turn knows that the model has seen them.
        """
        if not self.goal:
            self.goal = prompt
        self._trim()
        self._turn_start = len(self.messages)
        if self.window:
            self._starts.append(self._turn_start)
        self.messages.append({"role": "user", "content": prompt})
        self.record(UserMessage(text=prompt, turn=turn, inbox_ids=inbox_ids))

    def open_calls(self) -> list[tuple[str, str]]:
        """The (id, name) of the current turn's tool calls that have no result yet, in order."""
        waiting: dict[str, str] = {}
        for message in self.messages[self._turn_start :]:
            if message["role"] == "assistant":
                waiting = {c["id"]: c["function"]["name"] for c in message.get("tool_calls") or ()}
            elif message["role"] == "tool":
                waiting.pop(message.get("tool_call_id", ""), None)
        return list(waiting.items())

    def answer_open_calls(self, content: str, turn: int) -> int:
        """Answer every open tool call of the current turn with ``content`` (outcome
        ``interrupted``), so that what the log closes is a conversation a provider accepts;
        how many there were."""
        calls = self.open_calls()
        for call_id, name in calls:
            self.add_tool_result(call_id, name, content, ToolOutcome.INTERRUPTED, turn)
        return len(calls)

    def abandon_turn(self) -> None:
        """Cut a failed attempt's messages so the model never sees half a turn."""
        del self.messages[self._turn_start :]
        if self._starts and self._starts[-1] >= self._turn_start:
            self._starts.pop()

    def add_answer(self, response: ModelResponse, turn: int, cost_usd: float) -> None:
        """Add the model's answer (and buffer its event with the call's usage)."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": answer_content(response.text, response.tool_calls),
        }
        if response.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in response.tool_calls
            ]
        self.messages.append(message)
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
        """Add one tool result (buffered; it reaches the log with the next flush)."""
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        self.record(
            ToolResult(call_id=call_id, name=name, content=content, turn=turn, outcome=outcome)
        )


def answer_content(text: str, tool_calls: Sequence[object]) -> str | None:
    """An answer's content as providers take it: null only beside tool calls (an empty answer
    with neither would be refused as null content)."""
    return text or (None if tool_calls else "")


#: The event kinds that make up the conversation (and checkpoints, which close turns).
HISTORY_KINDS = (
    EventKind.USER_MESSAGE,
    EventKind.ASSISTANT_MESSAGE,
    EventKind.TOOL_RESULT,
    EventKind.CHECKPOINT,
)
