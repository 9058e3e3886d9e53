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
    HistorySummary,
    Lease,
    Payload,
    SessionKey,
    ToolCallRecord,
    ToolResult,
    UserMessage,
)

from ._model import Message, ModelResponse
from ._tool_result import ToolOutcome


def window_start(turn: int, window: int, keep: int) -> int:
    """The first turn number the model is sent while turn ``turn`` runs.

    ``window`` is the most turns sent (0: all), ``keep`` the turns a full window is cut down
    to (``keep == window``: one turn dropped per turn, a sliding window). The window holds
    turns ``1..turn`` until it is full, then it is cut to its ``keep`` newest turns and grows
    again: a pure function of the turn number, so that a resumed run cuts where its live run
    cut (turn numbers count every attempt, from the session's first turn).
    """
    if not window or turn <= window:
        return 1
    keep = min(max(keep, 1), window)
    length = keep + (turn - window - 1) % (window - keep + 1)
    return turn - length + 1


@attrs.frozen
class Window:
    """A history window: at most ``turns`` turns (0: all), a full one cut to ``keep``;
    ``summarised``: the cut turns are summarised (the run has a ``history_summary_model``)."""

    turns: int = 0
    keep: int = 0
    summarised: bool = False

    def start(self, turn: int) -> int:
        """The first turn number sent while turn ``turn`` runs (see :func:`window_start`)."""
        return window_start(turn, self.turns, self.keep)


@attrs.frozen
class DroppedBlock:
    """Turns about to be cut from the window: their numbers and messages (for a summary)."""

    first_turn: int
    last_turn: int
    messages: list[Message]


@attrs.define(eq=False)
class Conversation:
    """The message list sent to the model, plus a buffer of events not yet in the log.

    Events are buffered and flushed once per model call (the prompt, the previous call's tool
    results and the new answer in one commit), so the log costs one commit per call and a
    call's tokens are durable before its tools run. A failed attempt is cut from the messages
    (its events stay in the log) so a retry starts from the same state.

    The messages are: the system prompt (never changed), then, once the window has cut its
    first turn, the goal in a message of its own and the summary of the cut turns (when there
    is one), then the kept turns. Only a cut changes anything before the newest turn, so the
    prefix a provider caches holds from one model call to the next.
    """

    log: EventLog
    key: SessionKey
    system_prompt: str
    author: str
    #: Which turns are sent (the default: all of them).
    window: Window = attrs.field(factory=Window, kw_only=True)
    messages: list[Message] = attrs.field(init=False)
    goal: str = attrs.field(default="", init=False)
    #: The latest summary of cut turns (None: none written).
    summary: HistorySummary | None = attrs.field(default=None, init=False)
    #: The run's lease on the session, which fences every append (None: not leased).
    lease: Lease | None = attrs.field(default=None, init=False)
    _head: int = attrs.field(init=False)  # where the goal and summary messages begin
    _base: int = attrs.field(init=False)  # where the kept turns begin
    _first: int = attrs.field(default=1, init=False)  # the first turn number the window keeps
    _turn_start: int = attrs.field(init=False)
    _pending: list[Event] = attrs.field(factory=list, init=False)
    #: The (turn number, index in ``messages``) of each kept turn.
    _turns: list[tuple[int, int]] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        prompt = self.system_prompt
        self.messages = [{"role": "system", "content": prompt}] if prompt else []
        self._head = self._base = self._turn_start = len(self.messages)

    def load(
        self,
        history: list[Message],
        *,
        unfinished: int = 0,
        turns: Sequence[int] = (),
        first_turn: int = 1,
        summary: HistorySummary | None = None,
    ) -> None:
        """Put a resumed session's history (already windowed) after the system message.

        ``turns`` are the numbers of its turns, one per user message; ``first_turn`` is where
        the window began, ``summary`` the latest summary of cut turns. Its last
        ``unfinished`` messages are the committed prefix of a turn the resumed run goes on
        with: they are the current turn's (a failed attempt cuts them too).
        """
        self.summary, self._first = summary, first_turn
        self._set_header()
        self.messages[self._base :] = history
        starts = [i + self._base for i, m in enumerate(history) if m.get("role") == "user"]
        self._turns = list(zip(turns, starts, strict=True)) if turns else []
        self._turn_start = len(self.messages) - unfinished

    def dropped_by(self, turn: int) -> DroppedBlock | None:
        """The turns that starting turn ``turn`` cuts from the window (None: none)."""
        first = self.window.start(turn)
        cut = [(n, i) for n, i in self._turns if n < first]
        if not cut:
            return None
        end = self._turns[len(cut)][1] if len(cut) < len(self._turns) else len(self.messages)
        return DroppedBlock(cut[0][0], cut[-1][0], self.messages[cut[0][1] : end])

    def set_summary(self, summary: HistorySummary) -> None:
        """Send ``summary`` after the goal from now on (it replaces the one before)."""
        self.summary = summary
        self._set_header()

    def _cut(self, turn: int) -> None:
        """Keep only the turns the window holds while ``turn`` runs (see window_start)."""
        first = self.window.start(turn)
        if first == self._first:
            return
        self._first = first
        kept = [(n, i) for n, i in self._turns if n >= first]
        cut = kept[0][1] if kept else len(self.messages)
        removed = cut - self._base
        del self.messages[self._base : cut]
        self._turns = [(n, i - removed) for n, i in kept]
        self._set_header()

    def _set_header(self) -> None:
        """Put the goal and summary messages between the system prompt and the turns."""
        header = self._header()
        shift = len(header) - (self._base - self._head)
        self.messages[self._head : self._base] = header
        self._base += shift
        self._turns = [(n, i + shift) for n, i in self._turns]

    def _header(self) -> list[Message]:
        if self._first <= 1:
            return []
        note = f"[Goal of this run] {self.goal}\n" if self.goal else ""
        note += "[Context] Only the most recent turns are shown; earlier turns are in the log" + (
            "; a summary of them follows." if self.summary else "."
        )
        header: list[Message] = [{"role": "user", "content": note}]
        if self.summary is not None:
            s = self.summary
            text = f"[Summary of turns {s.first_turn}-{s.last_turn}] {s.text}"
            header.append({"role": "user", "content": text})
        return header

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
        """Start a turn: remember where it began and add its prompt (cutting old turns: call
        :meth:`dropped_by` first to summarise them).

        ``inbox_ids`` names the inbox messages in the prompt: a resume that goes on with this
        turn knows that the model has seen them.
        """
        if not self.goal:
            self.goal = prompt
        self._cut(turn)
        self._turn_start = len(self.messages)
        self._turns.append((turn, self._turn_start))
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
        if self._turns and self._turns[-1][1] >= self._turn_start:
            self._turns.pop()

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
