"""The conversation the model is sent, as one fold of the session's events.

A live run grows its history the one way a resume rebuilds it: it builds the event it records
and applies it (:meth:`History.apply`); a resume folds the events it reads from the log through
the same method. So what a resumed run sends is what its live run would have sent, byte for
byte, and a provider's prompt cache holds across the resume.

What the fold keeps: the turns, each a prompt, the answers and the tool results, in the order
they were recorded. A checkpoint closes the turn before it (one that leaves it open for a retry
does not): a failed attempt's answers and results stay in their turn, so a retry, or the next
turn, never hides from the model a tool call that ran. The last turn no checkpoint closed is
the *open turn*; a resume goes on with it (see :attr:`History.open_turn`).

Every turn is kept in the shape a provider accepts: each tool call of an answer is answered
once, right after it, in order. A call that has no result when the next answer comes or its
turn closes is answered as :data:`INTERRUPTED` (a log of an older release, a process that died
mid-call); a result that answers no waiting call is left out. The live run answers its own
calls, so for it this changes nothing.

The window (``history_turns``) cuts whole turns when a prompt begins a turn, as a pure function
of the turn number (:func:`window_start`): a resume that folds only the window's turns holds
the window its live run held. Once a turn is cut, the goal and the latest summary of the cut
turns (a :class:`eventlog.HistorySummary` event) are sent in messages of their own before the
kept turns. Only a cut changes anything before the newest turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from eventlog import (
    AssistantMessage,
    Checkpoint,
    Event,
    EventKind,
    HistorySummary,
    ToolCallRecord,
    ToolResult,
    UserMessage,
)

from .._model import Message, ToolCall

#: What the model is told for a tool call whose outcome the log does not have.
INTERRUPTED = (
    "interrupted: the run stopped before this call finished; it may or may not have taken "
    "effect. Check before you repeat it."
)

#: The event kinds the fold reads (a summary is read on its own: only the latest counts).
HISTORY_KINDS = (
    EventKind.USER_MESSAGE,
    EventKind.ASSISTANT_MESSAGE,
    EventKind.TOOL_RESULT,
    EventKind.CHECKPOINT,
)


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


@attrs.frozen
class OpenTurn:
    """The turn no checkpoint closed, at the end of the fold.

    ``answered``: the model answered in it. ``calls`` are its last answer's tool calls that
    have no result yet, in order, and ``first_index`` is the place of the first of them among
    the turn's tool calls (for their idempotency keys). ``complete``: its last answer asked for
    no tools (only its checkpoint is missing).
    """

    turn: int
    inbox_ids: tuple[str, ...]
    answered: bool
    calls: tuple[ToolCall, ...]
    first_index: int
    complete: bool


@attrs.define
class _Open:
    """What the fold tracks of the open turn."""

    turn: int
    inbox_ids: tuple[str, ...]
    start: int  # where its prompt is in the kept turns' messages
    answered: bool = False
    last_asked: bool = False  # its last answer asked for tools
    waiting: list[ToolCallRecord] = attrs.field(factory=list)  # calls with no result yet


@attrs.define(eq=False)
class History:
    """The conversation after the system prompt: a fold of the session's events.

    ``first_turn`` is the first turn the window keeps (a resume that reads only the window's
    turns starts there); ``goal`` is sent in a message of its own once a turn is cut (the first
    prompt, unless set before). It is the run's one record of its goal: checkpoints and the
    summariser read it here.
    """

    window: Window = attrs.field(factory=Window)
    goal: str = ""
    first_turn: int = 1
    #: The latest summary of cut turns (None: none applied).
    summary: HistorySummary | None = attrs.field(default=None, init=False)
    _body: list[Message] = attrs.field(factory=list, init=False)  # the kept turns
    _turns: list[tuple[int, int]] = attrs.field(factory=list, init=False)  # (number, index)
    _open: _Open | None = attrs.field(default=None, init=False)
    _calls: Counter[int] = attrs.field(factory=Counter, init=False)  # tool calls per turn

    @property
    def messages(self) -> list[Message]:
        """The messages sent after the system prompt: the goal and summary once a turn is
        cut, then the kept turns."""
        return [*self._header(), *self._body]

    def apply(self, event: Event) -> None:
        """Grow the conversation by ``event`` (kinds that are not conversation change
        nothing)."""
        p = event.payload
        if isinstance(p, UserMessage):
            self._begin(p)
        elif isinstance(p, AssistantMessage):
            self._answer(p)
        elif isinstance(p, ToolResult):
            self._result(p)
        elif isinstance(p, Checkpoint):
            if not p.open_turn:  # one that leaves the turn open for a retry closes nothing
                self._close()
        elif isinstance(p, HistorySummary):
            self.summary = p

    @property
    def open_turn(self) -> OpenTurn | None:
        """The turn no checkpoint closed (None: every turn is closed)."""
        o = self._open
        if o is None:
            return None
        return OpenTurn(
            turn=o.turn,
            inbox_ids=o.inbox_ids,
            answered=o.answered,
            calls=tuple(ToolCall(c.call_id, c.name, c.arguments) for c in o.waiting),
            first_index=self._calls[o.turn] - len(o.waiting),
            complete=o.answered and not o.last_asked,
        )

    def abandon_open_turn(self) -> None:
        """Drop the open turn (a prompt the model never answered is not history)."""
        if self._open is not None:
            del self._body[self._open.start :]
            self._turns.pop()
            self._open = None

    def dropped_by(self, turn: int) -> DroppedBlock | None:
        """The turns that starting turn ``turn`` cuts from the window (None: none)."""
        first = self.window.start(turn)
        cut = [(n, i) for n, i in self._turns if n < first]
        if not cut:
            return None
        end = self._turns[len(cut)][1] if len(cut) < len(self._turns) else len(self._body)
        return DroppedBlock(cut[0][0], cut[-1][0], self._body[cut[0][1] : end])

    def _begin(self, p: UserMessage) -> None:
        if self._open is not None:
            if self._open.answered:  # a prompt no checkpoint closed (logs of older versions)
                self._close()
            else:
                self.abandon_open_turn()
        if not self.goal:
            self.goal = p.text
        if p.turn < self.first_turn:  # a turn the window cut (a resume reads from its end)
            return
        self._cut(p.turn)
        self._turns.append((p.turn, len(self._body)))
        self._open = _Open(p.turn, p.inbox_ids, len(self._body))
        self._body.append({"role": "user", "content": p.text})

    def _answer(self, p: AssistantMessage) -> None:
        o = self._open
        if o is None:  # an answer outside any turn: never in a log a run writes
            return
        self._interrupt(o)
        calls = list(p.tool_calls)
        self._body.append(assistant_message(p.text, calls))
        o.answered, o.last_asked, o.waiting = True, bool(calls), calls
        self._calls[p.turn] += len(calls)

    def _result(self, p: ToolResult) -> None:
        o = self._open
        index = (
            next((i for i, c in enumerate(o.waiting) if c.call_id == p.call_id), -1) if o else -1
        )
        if o is None or index < 0:  # it answers no waiting call
            return
        del o.waiting[index]
        self._body.append({"role": "tool", "tool_call_id": p.call_id, "content": p.content})

    def _close(self) -> None:
        if self._open is not None:
            self._interrupt(self._open)
            self._open = None

    def _interrupt(self, o: _Open) -> None:
        """Answer the calls still waiting as interrupted."""
        for call in o.waiting:
            self._body.append(
                {"role": "tool", "tool_call_id": call.call_id, "content": INTERRUPTED}
            )
        o.waiting = []

    def _cut(self, turn: int) -> None:
        """Keep only the turns the window holds while ``turn`` runs (see window_start)."""
        first = self.window.start(turn)
        if first <= self.first_turn:
            return
        self.first_turn = first
        kept = [(n, i) for n, i in self._turns if n >= first]
        cut = kept[0][1] if kept else len(self._body)
        del self._body[:cut]
        self._turns = [(n, i - cut) for n, i in kept]

    def _header(self) -> list[Message]:
        """The goal and summary messages, sent between the system prompt and the turns."""
        if self.first_turn <= 1:
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


def assistant_message(text: str, tool_calls: Sequence[ToolCallRecord]) -> Message:
    """An answer as providers take it: its content null only beside tool calls (an empty
    answer with neither would be refused as null content)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if tool_calls else "")}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in tool_calls
        ]
    return message
