"""Control a session from any process that can open its event log: inject, pause, resume, stop,
wake.

A run watches its session's log for these events and obeys them (within about a second), the
same way it obeys its in-process handle; a session that is not running finds them when it is
resumed (an inject is delivered, a stop or pause is honoured at start).
"""

from __future__ import annotations

import attrs

from eventlog import (
    Control,
    Event,
    EventLog,
    SessionFinished,
    SessionKey,
)
from permissions import Caller

from .._callers import to_originator
from .._errors import ConfigurationError
from ._control_requests import ControlAction
from ._inbox import author_of, check_inject, inject_event
from ._session_state import session_state

#: The control actions another process may send.
ACTIONS = tuple(a.value for a in ControlAction)


async def send_inject(
    log: EventLog,
    key: SessionKey,
    text: str,
    *,
    caller: Caller | None = None,
    via: str = "remote",
    wake: bool = False,
) -> str:
    """Append an inbox message for ``key``; returns its message id. Durable when this returns.

    A running session that sleeps wakes for the message anyway; ``wake`` also appends a wake
    request with it, in the same append: a session that deferred itself does not wait for its
    wake time either (as :func:`send_control` with ``"wake"``).

    Raises :class:`eventlog.SessionFinished` when the session completed or was stopped for
    good: nobody would ever read the message.
    """
    message_id, _ = await append_inject(log, key, text, caller=caller, via=via, wake=wake)
    return message_id


async def append_inject(
    log: EventLog,
    key: SessionKey,
    text: str,
    *,
    caller: Caller | None = None,
    via: str = "remote",
    wake: bool = False,
    author: str | None = None,
) -> tuple[str, list[int]]:
    """:func:`send_inject`, and the seqs of what it appended (the message, then the wake
    request with ``wake``); ``author`` overrides the events' author (default: ``via`` and the
    caller's identity), as the HTTP API records the principal's name."""
    check_inject(text)
    await _refuse_finished(log, key, "inject")
    originator = to_originator(caller)
    message_id, event = inject_event(key, text, originator, via=via)
    if author is not None:
        event = attrs.evolve(event, author=author)
    events = [event]
    if wake:
        wake_request = Control(ControlAction.WAKE.value, originator)
        events.append(Event.create(key, wake_request, author=event.author))
    return message_id, await log.append(events)


async def send_control(
    log: EventLog,
    key: SessionKey,
    action: str,
    *,
    caller: Caller | None = None,
    detail: str = "",
    via: str = "remote",
) -> None:
    """Append a control request (``pause``, ``resume``, ``stop`` or ``wake``) for ``key``.

    A running session obeys it within ``control_poll``; one that is not running finds it at
    its next resume (a stop sticks: only a forced resume runs the session again). Raises
    :class:`eventlog.SessionFinished` when the session completed or was stopped for good.
    """
    await append_control(log, key, action, caller=caller, detail=detail, via=via)


async def append_control(
    log: EventLog,
    key: SessionKey,
    action: str,
    *,
    caller: Caller | None = None,
    detail: str = "",
    via: str = "remote",
    author: str | None = None,
) -> int:
    """:func:`send_control`, and the seq of the request it appended; ``author`` overrides the
    event's author (default: ``via`` and the caller's identity)."""
    if action not in ACTIONS:
        raise ConfigurationError(f"unknown control action {action!r}; one of {', '.join(ACTIONS)}")
    what = ControlAction(action)
    await _refuse_finished(log, key, what)
    originator = to_originator(caller)
    who = author if author is not None else author_of(via, originator)
    event = Event.create(key, Control(what.value, originator, detail), author=who)
    (seq,) = await log.append([event])
    return seq


async def _refuse_finished(log: EventLog, key: SessionKey, what: str) -> None:
    state = await session_state(log, key)
    if state.completed:
        raise SessionFinished(str(key), f"it completed; cannot {what}")
    if state.stopped:
        raise SessionFinished(str(key), f"it was stopped; cannot {what} (resume it with force)")
