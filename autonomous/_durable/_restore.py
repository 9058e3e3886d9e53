"""Rebuild a run's state from its session's event log: totals, history, inbox, control.

Every read is bounded by an index: the latest checkpoint, the events after it, the turns of the
history window (when one is set: from the first turn :func:`window_start` keeps, so the window is
the one the live run had, cut at the same turns), the latest history summary (looked for only
when the window is summarised: a session that never had one would be read whole looking for it),
and the inbox and control events from the checkpoint's horizon.

The history is the fold of those events (:class:`History`, the fold the live run grows its
conversation by): the turns closed by a checkpoint, plus, for a turn the process did not
finish, its committed prefix (:class:`OpenTurn`, the open turn at the end of the fold), whose
unanswered tool calls the resumed run answers before anything else. A prompt the model never
answered is not history: the resumed run sends its inbox messages again in a turn of its own.
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
    UserMessage,
)

from .._control._control_requests import ControlAction
from .._control._inbox import InboxMessage
from .._control._session_state import SessionState
from .._control._session_state import horizon as first_unseen
from .._state._history import HISTORY_KINDS, History, OpenTurn, Window
from .._state._run_state import Spending


@attrs.frozen
class Restored:
    """What a resumed run starts from."""

    checkpoint: Checkpoint | None
    checkpoint_seq: int
    totals: Spending
    #: The conversation a resume goes on with (its window, where it began, its summary).
    history: History
    pending: tuple[InboxMessage, ...]
    delivered: frozenset[str]
    paused: bool
    last_seq: int
    unfinished: OpenTurn | None = None
    stopped: bool = False
    woken: bool = False
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
    goal = cp.goal if cp is not None and cp.goal else await _first_prompt(log, key)
    history = History(window=window, goal=goal, first_turn=first)
    if first > 1 and window.summarised:
        summary = await _latest_summary(log, key)
        if summary is not None:
            history.apply(summary)
    for event in await _history_events(log, key, first, cp_seq, tail):
        history.apply(event)
    unfinished = _unfinished(history)
    horizon = first_unseen(cp, cp_seq)
    inbox_from = min(cp.inbox_from_seq or horizon, horizon) if cp is not None else 1
    if inbox_from > cp_seq:
        inbox_events = [e for e in tail if e.kind in _INBOX_KINDS]
    else:
        inbox_events = await log.read(key, after_seq=inbox_from - 1, kinds=_INBOX_KINDS)
    pending, delivered = _inbox(inbox_events)
    controls = _controls(tail if horizon > cp_seq else await _read_controls(log, key, horizon))
    budgets = [e.payload for e in tail if isinstance(e.payload, Budgets)]
    return Restored(
        checkpoint=cp,
        checkpoint_seq=cp_seq,
        totals=_totals(cp, tail, counted=unfinished is not None),
        budgets=budgets[-1] if budgets else cp.budgets if cp is not None else None,
        history=history,
        pending=pending,
        delivered=delivered,
        paused=controls.paused if controls.paused is not None else bool(cp and cp.paused),
        last_seq=tail[-1].seq if tail else cp_seq,
        unfinished=unfinished,
        stopped=bool(cp is not None and cp.stopped) or controls.stopped,
        woken=controls.woken,
    )


def _unfinished(history: History) -> OpenTurn | None:
    """The open turn at the end of the fold, which the resumed run goes on with, if the model
    answered in it (one it never answered is dropped: its inbox is delivered again)."""
    turn = history.open_turn
    if turn is None:
        return None
    if not turn.answered:
        history.abandon_open_turn()
        return None
    return turn


def _last_turn(cp: Checkpoint | None, tail: list[Event]) -> int:
    """The number of the last turn begun: the one after which the window is rebuilt."""
    for event in reversed(tail):
        if isinstance(event.payload, UserMessage):
            return event.payload.turn
    if cp is None:
        return 0
    return cp.open_turn or cp.turns


async def _latest_summary(log: EventLog, key: SessionKey) -> Event | None:
    """The newest summary of cut turns. Read only for a run that writes them: it looks back
    through the session's events until it finds one, so a session that never had one would
    cost a read of its whole log (a run without a summary model sends no summary)."""
    last = await log.read_last(key, [EventKind.HISTORY_SUMMARY], 1)
    return last[0] if last else None


_INBOX_KINDS = (EventKind.INBOX_QUEUED, EventKind.INBOX_DELIVERED)


def describe(restored: Restored) -> dict[str, Any]:
    """Log fields for a resume (numbers only)."""
    return {
        "checkpoint_seq": restored.checkpoint_seq,
        "turns": restored.totals.turns,
        "history_messages": len(restored.history.messages),
        "history_from_turn": restored.history.first_turn,
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


def _totals(cp: Checkpoint | None, tail: list[Event], *, counted: bool) -> Spending:
    """Checkpoint totals plus what a crashed run spent after it (budgets never go back): every
    model call whose answer is in the log counts.

    A turn begun after the checkpoint counts (a retry of a turn the checkpoint left open, once
    the model answered in it); with no checkpoint at all, only one the model answered (the
    resumed run goes on with it), so that a log of bare history starts at 0.
    """
    t = Spending() if cp is None else Spending.from_checkpoint(cp)
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


async def _history_events(
    log: EventLog, key: SessionKey, first: int, cp_seq: int, tail: list[Event]
) -> list[Event]:
    """The conversation events from the first prompt of turn ``first`` on (an unfinished turn
    after the checkpoint, or one it left open for a retry, included)."""
    closed: list[Event] = []
    if cp_seq:
        after = await _seq_before_turn(log, key, first) if first > 1 else 0
        # Every kind is read (and filtered here): a row of a kind this code cannot read is a
        # CorruptEvent, never silently left out of what the model is sent.
        events = await log.read(key, after_seq=after, kinds=None) if after < cp_seq else []
        closed = [e for e in events if e.seq <= cp_seq]
    return [e for e in (*closed, *tail) if e.kind in HISTORY_KINDS]


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
