"""Rebuild a run's state from its session's event log: totals, history, inbox, control.

Every read is bounded by an index: the latest checkpoint, the events after it, the turns of the
history window (when one is set: from the first turn :func:`window_start` keeps, so the window is
the one the live run had, cut at the same turns), the latest history summary (looked for only
when the window is summarised: a session that never had one would be read whole looking for it),
and the inbox and control events from the checkpoint's horizon.

The history a resume sends is always one a provider accepts: the turns closed by a checkpoint,
plus, for a turn the process did not finish, its committed prefix (:class:`Unfinished`), whose
unanswered tool calls the resumed run answers before anything else.
"""

from __future__ import annotations

from typing import Any

import attrs

from eventlog import (
    AssistantMessage,
    Budgets,
    Checkpoint,
    Control,
    Event,
    EventKind,
    EventLog,
    HistorySummary,
    InboxDelivered,
    InboxQueued,
    SessionKey,
    ToolResult,
    UserMessage,
)

from ._control_requests import ControlAction
from ._conversation import HISTORY_KINDS, Conversation, Window, answer_content
from ._decide import Totals
from ._inbox import InboxMessage
from ._model import Message, ToolCall
from ._session_state import SessionState
from ._session_state import horizon as first_unseen


@attrs.frozen
class Unfinished:
    """A turn the process did not finish: its prompt and at least one answer are in the log.

    ``calls`` are its last answer's tool calls that have no result yet, in order, and
    ``first_index`` is the place of the first of them among the turn's tool calls (for their
    idempotency keys). ``complete`` is True when its last answer asked for no tools: only its
    checkpoint is missing.
    """

    turn: int
    calls: tuple[ToolCall, ...]
    first_index: int
    inbox_ids: tuple[str, ...]
    complete: bool
    length: int  # how many history messages belong to it (they end the history)


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
    unfinished: Unfinished | None = None
    stopped: bool = False
    woken: bool = False
    #: The turn number of each turn in ``history`` (one per user message), in order.
    turn_numbers: tuple[int, ...] = ()
    #: The first turn number the window keeps (1: nothing cut yet).
    first_turn: int = 1
    #: The latest summary of cut turns (None: none written).
    summary: HistorySummary | None = None
    #: The session's budgets as last recorded (None: a session from before they were).
    budgets: Budgets | None = None


async def restore(
    log: EventLog, key: SessionKey, *, window: Window, known: SessionState | None = None
) -> Restored:
    """The state a resume continues from (see the module docstring for what is read).

    ``known`` is the session's state as the caller read it under the session's lease (so its
    checkpoint is still the latest): its checkpoint is not read again.
    """
    if known is None:
        cp_event = await log.latest_checkpoint(key)
        payload = cp_event.payload if cp_event is not None else None
        assert payload is None or isinstance(payload, Checkpoint)
        known = SessionState(payload, cp_event.seq if cp_event is not None else 0, False)
    cp, cp_seq = known.checkpoint, known.checkpoint_seq
    tail = await log.read(key, after_seq=cp_seq)
    first = window.start(_last_turn(cp, tail))
    history, numbers, unfinished = await _history(log, key, first, known, tail)
    horizon = first_unseen(cp, cp_seq)
    inbox_from = min(cp.inbox_from_seq or horizon, horizon) if cp is not None else 1
    if inbox_from > cp_seq:
        inbox_events = [e for e in tail if e.kind in _INBOX_KINDS]
    else:
        inbox_events = await log.read(key, after_seq=inbox_from - 1, kinds=_INBOX_KINDS)
    pending, delivered = _inbox(inbox_events)
    controls = _controls(tail if horizon > cp_seq else await _read_controls(log, key, horizon))
    goal = cp.goal if cp is not None and cp.goal else await _first_prompt(log, key)
    budgets = [e.payload for e in tail if isinstance(e.payload, Budgets)]
    return Restored(
        checkpoint=cp,
        checkpoint_seq=cp_seq,
        totals=_totals(cp, tail, counted=unfinished is not None),
        budgets=budgets[-1] if budgets else cp.budgets if cp is not None else None,
        history=history,
        goal=goal,
        pending=pending,
        delivered=delivered,
        paused=controls.paused if controls.paused is not None else bool(cp and cp.paused),
        last_seq=tail[-1].seq if tail else cp_seq,
        unfinished=unfinished,
        stopped=bool(cp is not None and cp.stopped) or controls.stopped,
        woken=controls.woken,
        turn_numbers=numbers,
        first_turn=first,
        summary=await _latest_summary(log, key) if first > 1 and window.summarised else None,
    )


def load_history(conv: Conversation, restored: Restored) -> None:
    """Put ``restored``'s history window (its turns, where it began, its summary) in ``conv``."""
    unfinished = restored.unfinished
    conv.load(
        restored.history,
        unfinished=unfinished.length if unfinished else 0,
        turns=restored.turn_numbers,
        first_turn=restored.first_turn,
        summary=restored.summary,
    )


def _last_turn(cp: Checkpoint | None, tail: list[Event]) -> int:
    """The number of the last turn begun: the one after which the window is rebuilt."""
    for event in reversed(tail):
        if isinstance(event.payload, UserMessage):
            return event.payload.turn
    if cp is None:
        return 0
    return cp.open_turn or cp.turns


async def _latest_summary(log: EventLog, key: SessionKey) -> HistorySummary | None:
    """The newest summary of cut turns. Read only for a run that writes them: it looks back
    through the session's events until it finds one, so a session that never had one would
    cost a read of its whole log (a run without a summary model sends no summary)."""
    last = await log.read_last(key, [EventKind.HISTORY_SUMMARY], 1)
    payload = last[0].payload if last else None
    return payload if isinstance(payload, HistorySummary) else None


_INBOX_KINDS = (EventKind.INBOX_QUEUED, EventKind.INBOX_DELIVERED)


def describe(restored: Restored) -> dict[str, Any]:
    """Log fields for a resume (numbers only)."""
    return {
        "checkpoint_seq": restored.checkpoint_seq,
        "turns": restored.totals.turns,
        "history_messages": len(restored.history),
        "history_from_turn": restored.first_turn,
        "pending_inbox": len(restored.pending),
        "unfinished_turn": restored.unfinished is not None,
        "open_calls": len(restored.unfinished.calls) if restored.unfinished else 0,
    }


async def undelivered(
    log: EventLog, key: SessionKey, cp: Checkpoint, cp_seq: int
) -> tuple[str, ...]:
    """The texts of the inbox messages a finished session acknowledged and never delivered."""
    horizon = first_unseen(cp, cp_seq)
    start = min(cp.inbox_from_seq or horizon, horizon)
    pending, _ = _inbox(await log.read(key, after_seq=start - 1, kinds=_INBOX_KINDS))
    return tuple(m.text for m in pending)


def _totals(cp: Checkpoint | None, tail: list[Event], *, counted: bool) -> Totals:
    """Checkpoint totals plus what a crashed run spent after it (budgets never go back): every
    model call whose answer is in the log counts.

    A turn begun after the checkpoint counts (a retry of a turn the checkpoint left open, once
    the model answered in it); with no checkpoint at all, only one the model answered (the
    resumed run goes on with it), so that a log of bare history starts at 0.
    """
    t = Totals() if cp is None else Totals.from_checkpoint(cp)
    started = False
    retried = cp is not None and cp.open_turn > 0
    for event in tail:
        p = event.payload
        if isinstance(p, AssistantMessage | HistorySummary):
            t = t.add_call(p.input_tokens, p.output_tokens, p.cost_usd, p.cached_input_tokens)
            started = started or (retried and isinstance(p, AssistantMessage))
        elif isinstance(p, UserMessage):
            started = True
    return t.add_turn() if started and (cp is not None or counted) else t


async def _history(
    log: EventLog, key: SessionKey, first: int, known: SessionState, tail: list[Event]
) -> tuple[list[Message], tuple[int, ...], Unfinished | None]:
    """The conversation of closed turns from turn ``first`` on, then the committed prefix of
    a turn left unfinished after the checkpoint (or left open by it, for a retry); and the
    turn number of each turn in it."""
    cp, cp_seq = known.checkpoint, known.checkpoint_seq
    closed: list[Event] = []
    if cp_seq:
        after = await _seq_before_turn(log, key, first) if first > 1 else 0
        # Every kind is read (and filtered here): a row of a kind this code cannot read is a
        # CorruptEvent, never silently left out of what the model is sent.
        events = await log.read(key, after_seq=after, kinds=None) if after < cp_seq else []
        closed = [e for e in events if e.seq <= cp_seq and e.kind in HISTORY_KINDS]
        closed = closed[_first_prompt_at(closed, first) :]
    open_part: list[Event] = []
    if cp is not None and cp.open_turn:  # the checkpoint's turn goes on: it is not closed
        start = _last_prompt_at(closed)
        closed, open_part = closed[:start], closed[start:]
    turns = turns_from_events(closed)
    history = [m for _, messages in turns for m in messages]
    numbers = tuple(n for n, messages in turns if messages and messages[0]["role"] == "user")
    unfinished = _unfinished(open_part + [e for e in tail if e.kind in HISTORY_KINDS], closed)
    if unfinished is None:
        return history, numbers, None
    prefix, state = unfinished
    return history + prefix, (*numbers, state.turn), state


def _last_prompt_at(events: list[Event]) -> int:
    """The index of the last prompt in ``events`` (their length when there is none)."""
    for i in range(len(events) - 1, -1, -1):
        if isinstance(events[i].payload, UserMessage):
            return i
    return len(events)


def _first_prompt_at(events: list[Event], first: int) -> int:
    """The index of the first prompt of turn ``first`` or later (what comes before it belongs
    to cut turns); 0 when nothing is cut."""
    if first <= 1:
        return 0
    for i, event in enumerate(events):
        if isinstance(event.payload, UserMessage) and event.payload.turn >= first:
            return i
    return len(events)


async def _seq_before_turn(log: EventLog, key: SessionKey, first: int) -> int:
    """The seq just before the first prompt of turn ``first`` or later (read from the newest
    prompts back, as few as it takes: retried attempts have turn numbers of their own)."""
    wanted = 64
    while True:
        starts = await log.read_last(key, [EventKind.USER_MESSAGE], wanted)
        kept = [e for e in starts if isinstance(e.payload, UserMessage) and e.payload.turn >= first]
        if len(kept) < len(starts) or len(starts) < wanted:
            return kept[0].seq - 1 if kept else (starts[-1].seq if starts else 0)
        # Every prompt read is of the window: the window begins further back.
        wanted *= 4


def history_from_events(events: list[Event]) -> list[Message]:
    """Messages of the turns closed by a checkpoint (see :func:`turns_from_events`)."""
    return [m for _, messages in turns_from_events(events) for m in messages]


def turns_from_events(events: list[Event]) -> list[tuple[int, list[Message]]]:
    """The turns closed by a checkpoint: number and messages.

    A failed attempt's messages are part of its turn (what its tool calls did stays in view);
    a checkpoint that leaves its turn open for a retry does not close it. Each turn comes out
    well formed: every tool call answered once, by id, in order (a call the log has no result
    for, as a failed attempt of an older release or a log written before results were closed
    on exit may have, is answered as interrupted; a result that answers no call is left out).
    """
    turns: list[tuple[int, list[Message]]] = []
    turn: list[Message] = []
    number = 0
    for event in events:
        p = event.payload
        if isinstance(p, Checkpoint):
            if p.open_turn:
                continue
            if turn:
                turns.append((number, well_formed(turn)))
            turn = []
        elif isinstance(p, UserMessage):
            if _answered(turn):  # a prompt no checkpoint closed (logs of older versions)
                turns.append((number, well_formed(turn)))
            turn, number = [{"role": "user", "content": p.text}], p.turn
        elif isinstance(p, AssistantMessage):
            turn.append(_assistant(p))
        elif isinstance(p, ToolResult):
            turn.append({"role": "tool", "tool_call_id": p.call_id, "content": p.content})
    return turns


def _answered(turn: list[Message]) -> bool:
    """Whether a turn that a later prompt follows without a checkpoint got an answer."""
    return any(m["role"] == "assistant" for m in turn)


def well_formed(messages: list[Message]) -> list[Message]:
    """``messages`` with every assistant tool call answered exactly once, right after it."""
    out: list[Message] = []
    waiting: list[str] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in waiting:
                waiting.remove(call_id)
                out.append(message)
            continue
        if waiting:
            out.extend(_interrupted(call_id) for call_id in waiting)
            waiting = []
        out.append(message)
        if role == "assistant":
            waiting = [c["id"] for c in message.get("tool_calls") or ()]
    out.extend(_interrupted(call_id) for call_id in waiting)
    return out


def _interrupted(call_id: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED}


#: What the model is told for a tool call whose outcome the log does not have.
INTERRUPTED = (
    "interrupted: the run stopped before this call finished; it may or may not have taken "
    "effect. Check before you repeat it."
)


def _unfinished(
    events: list[Event], closed: list[Event]
) -> tuple[list[Message], Unfinished] | None:
    """The committed prefix of the turn after the last checkpoint, if the model answered in it.

    A prompt the model never answered is not history: the resumed run sends its inbox
    messages again in a turn of its own. ``closed`` are the history events before: the tool
    calls of the turn's failed attempts among them count for the idempotency keys.
    """
    start = max((i for i, e in enumerate(events) if e.kind is EventKind.USER_MESSAGE), default=-1)
    if start < 0:
        return None
    prompt = events[start].payload
    assert isinstance(prompt, UserMessage)
    messages: list[Message] = [{"role": "user", "content": prompt.text}]
    answers: list[AssistantMessage] = []
    answered: set[str] = set()
    for event in events[start + 1 :]:
        p = event.payload
        if isinstance(p, AssistantMessage):
            answers.append(p)
            messages.append(_assistant(p))
        elif isinstance(p, ToolResult):
            answered.add(p.call_id)
            messages.append({"role": "tool", "tool_call_id": p.call_id, "content": p.content})
    if not answers:
        return None
    last = answers[-1]
    open_calls = tuple(
        ToolCall(c.call_id, c.name, c.arguments)
        for c in last.tool_calls
        if c.call_id not in answered
    )
    before = sum(len(a.tool_calls) for a in answers) - len(open_calls)
    before += sum(
        len(e.payload.tool_calls)
        for e in closed
        if isinstance(e.payload, AssistantMessage) and e.payload.turn == prompt.turn
    )
    # Only the last answer may be waiting for results (the resumed run gives them); what
    # comes before it is made well formed like any closed turn.
    i = max(n for n, m in enumerate(messages) if m["role"] == "assistant")
    ids = {c.call_id for c in last.tool_calls}
    results = [m for m in messages[i + 1 :] if m["tool_call_id"] in ids]
    kept = [*well_formed(messages[:i]), messages[i], *_first_of_each(results)]
    state = Unfinished(
        turn=prompt.turn,
        calls=open_calls,
        first_index=before,
        inbox_ids=prompt.inbox_ids,
        complete=not last.tool_calls,
        length=len(kept),
    )
    return kept, state


def _first_of_each(results: list[Message]) -> list[Message]:
    """Tool results with a duplicate answer to the same call left out."""
    seen: set[str] = set()
    kept = []
    for m in results:
        if m["tool_call_id"] not in seen:
            seen.add(m["tool_call_id"])
            kept.append(m)
    return kept


def _assistant(p: AssistantMessage) -> Message:
    message: dict[str, Any] = {"role": "assistant", "content": answer_content(p.text, p.tool_calls)}
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


@attrs.frozen
class _Controls:
    paused: bool | None  # None: no pause or resume request since the horizon
    stopped: bool
    woken: bool


def _controls(events: list[Event]) -> _Controls:
    """What the control requests since the horizon ask of the resumed run.

    The newest pause or resume wins; a stop sticks; a wake ends the resume's wait.
    """
    paused: bool | None = None
    stopped = woken = False
    for event in events:
        p = event.payload
        if not isinstance(p, Control):
            continue
        if p.action in (ControlAction.PAUSE, ControlAction.RESUME):
            paused = p.action == ControlAction.PAUSE
        elif p.action == ControlAction.STOP:
            stopped = True
        elif p.action == ControlAction.WAKE:
            woken = True
    return _Controls(paused, stopped, woken)


async def _read_controls(log: EventLog, key: SessionKey, horizon: int) -> list[Event]:
    return await log.read(key, after_seq=horizon - 1, kinds=[EventKind.CONTROL])


async def _first_prompt(log: EventLog, key: SessionKey) -> str:
    first = await log.read(key, kinds=[EventKind.USER_MESSAGE], limit=1)
    payload = first[0].payload if first else None
    return payload.text if isinstance(payload, UserMessage) else ""
