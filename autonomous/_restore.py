"""Rebuild a run's state from its session's event log: totals, history window, inbox, pause.

Every read is bounded by an index: the latest checkpoint, the events after it, the last N turns
(when a history window is set) and the inbox from its oldest undelivered message.
"""

from __future__ import annotations

from typing import Any

import attrs

from eventlog import (
    AssistantMessage,
    Checkpoint,
    Control,
    Event,
    EventKind,
    EventLog,
    InboxDelivered,
    InboxQueued,
    SessionKey,
    ToolResult,
    UserMessage,
)

from ._conversation import HISTORY_KINDS
from ._decide import Totals
from ._inbox import InboxMessage
from ._model import Message


@attrs.frozen
class Restored:
    """What a resumed run starts from."""

    checkpoint: Checkpoint | None
    checkpoint_seq: int
    totals: Totals
    history: list[Message]
    goal: str
    pending: tuple[InboxMessage, ...]
    delivered: frozenset[str]
    paused: bool
    last_seq: int


async def restore(log: EventLog, key: SessionKey, *, history_turns: int) -> Restored:
    """The state a resume continues from (see the module docstring for what is read)."""
    cp_event = await log.latest_checkpoint(key)
    cp = cp_event.payload if cp_event is not None else None
    assert cp is None or isinstance(cp, Checkpoint)
    cp_seq = cp_event.seq if cp_event is not None else 0
    tail = await log.read(key, after_seq=cp_seq)
    totals = _totals(cp, tail)
    history = await _history(log, key, history_turns, cp_seq)
    inbox_from = cp.inbox_from_seq if cp is not None and cp.inbox_from_seq else cp_seq + 1
    inbox_events = (
        [e for e in tail if e.kind in _INBOX_KINDS]
        if inbox_from > cp_seq
        else await log.read(key, after_seq=inbox_from - 1, kinds=_INBOX_KINDS)
    )
    pending, delivered = _inbox(inbox_events)
    goal = cp.goal if cp is not None and cp.goal else await _first_prompt(log, key)
    last_seq = tail[-1].seq if tail else cp_seq
    return Restored(cp, cp_seq, totals, history, goal, pending, delivered, _paused(tail), last_seq)


_INBOX_KINDS = (EventKind.INBOX_QUEUED, EventKind.INBOX_DELIVERED)


def _totals(cp: Checkpoint | None, tail: list[Event]) -> Totals:
    """Checkpoint totals plus what a crashed turn spent after it (budgets never go back)."""
    t = (
        Totals()
        if cp is None
        else Totals(cp.turns, cp.input_tokens, cp.output_tokens, cp.cost_usd, cp.model_calls)
    )
    started = False
    for event in tail:
        p = event.payload
        if isinstance(p, AssistantMessage):
            t = t.add_call(p.input_tokens, p.output_tokens, p.cost_usd)
        elif isinstance(p, UserMessage):
            started = True
    # A session with no checkpoint starts at turn 0 (its history is just context).
    return t.add_turn() if started and cp is not None else t


async def _history(log: EventLog, key: SessionKey, turns: int, cp_seq: int) -> list[Message]:
    """The conversation of finished turns (the newest ``turns`` of them when set)."""
    after = 0
    if turns:
        starts = await log.read_last(key, [EventKind.USER_MESSAGE], turns)
        after = starts[0].seq - 1 if starts else 0
    events = await log.read(key, after_seq=after, kinds=HISTORY_KINDS)
    if not cp_seq:  # never checkpointed: all of it is context, less a half-written exchange
        return complete_prefix(history_from_events(events, closed_only=False))
    return history_from_events([e for e in events if e.seq <= cp_seq])


def history_from_events(events: list[Event], *, closed_only: bool = True) -> list[Message]:
    """Messages of the turns closed by a checkpoint that did not mark them failed (or of
    every turn, with ``closed_only=False``)."""
    history: list[Message] = []
    turn: list[Message] = []
    for event in events:
        p = event.payload
        if isinstance(p, Checkpoint):
            if not p.turn_failed:
                history.extend(turn)
            turn = []
        elif isinstance(p, UserMessage):
            turn.append({"role": "user", "content": p.text})
        elif isinstance(p, AssistantMessage):
            turn.append(_assistant(p))
        elif isinstance(p, ToolResult):
            turn.append({"role": "tool", "tool_call_id": p.call_id, "content": p.content})
    return history if closed_only else history + turn


def complete_prefix(messages: list[Message]) -> list[Message]:
    """The longest prefix in which every tool call the model asked for has its result."""
    cut, waiting = 0, set()
    for i, message in enumerate(messages):
        if message["role"] == "tool":
            waiting.discard(message.get("tool_call_id"))
        elif message["role"] == "assistant":
            if waiting:
                break
            waiting = {c["id"] for c in message.get("tool_calls", ())}
        elif waiting:
            break
        if not waiting:
            cut = i + 1
    return messages[:cut]


def _assistant(p: AssistantMessage) -> Message:
    message: dict[str, Any] = {"role": "assistant", "content": p.text or None}
    if p.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in p.tool_calls
        ]
    return message


def _inbox(events: list[Event]) -> tuple[tuple[InboxMessage, ...], frozenset[str]]:
    queued: dict[str, InboxMessage] = {}
    delivered: set[str] = set()
    for event in events:
        p = event.payload
        if isinstance(p, InboxQueued):
            queued[p.message_id] = InboxMessage(p.message_id, p.text, p.caller, event.seq)
        elif isinstance(p, InboxDelivered):
            delivered.update(p.message_ids)
    pending = tuple(m for mid, m in queued.items() if mid not in delivered)
    return pending, frozenset(delivered)


def _paused(tail: list[Event]) -> bool:
    """True when the newest pause or resume request after the checkpoint is a pause."""
    paused = False
    for event in tail:
        p = event.payload
        if isinstance(p, Control) and p.action in ("pause", "resume"):
            paused = p.action == "pause"
    return paused


async def _first_prompt(log: EventLog, key: SessionKey) -> str:
    first = await log.read(key, kinds=[EventKind.USER_MESSAGE], limit=1)
    payload = first[0].payload if first else None
    return payload.text if isinstance(payload, UserMessage) else ""
