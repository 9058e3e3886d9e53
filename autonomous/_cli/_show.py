"""``autonomous show``: a session's status, budgets and error, then its timeline, one line per
event, in words (``--json``: its events as stored; ``ls --json`` gives the session's state);
``--follow`` prints new events as they are appended until the session exits."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import anyio
import attrs

from eventlog import (
    AssistantMessage,
    Budgets,
    Checkpoint,
    Control,
    Event,
    EventKind,
    EventLog,
    InboxDelivered,
    InboxQueued,
    Note,
    Originator,
    PermissionDecision,
    Schedule,
    SessionKey,
    SessionSummary,
    ToolResult,
    UserMessage,
    utcnow,
)
from eventlog.codec import event_to_dict

from ._common import CliError, emit_json, one_line, open_log, resolve_session
from ._decimals import decimal_text, usd
from ._exits import Exit, for_signal
from ._ls import activity_text, cost_text
from ._signals import until_signal
from ._times import show_span, show_time, show_wake
from ._view import SessionView, budgets_left, error_of, held, view_of

#: Seconds between two reads of the log while following a session.
FOLLOW_POLL = 0.2


def add_show_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``show``."""
    parser.add_argument("session", help="app/user/session_id, or a session id unique in the log")
    parser.add_argument("--tail", type=int, help="only the last N events")
    parser.add_argument("--width", type=int, default=110, help="cut each line's text (default 110)")
    parser.add_argument("--full", action="store_true", help="do not cut the text")
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="then print new events as they come, until the session exits (or Ctrl-C)",
    )


async def cmd_show(args: argparse.Namespace) -> int:
    """Print the timeline of one session's events (then follow it, with ``--follow``)."""
    if not args.follow:
        await _show(args)
        return Exit.OK
    # Ctrl-C (or SIGTERM) ends following: watched from the start, so it is never a traceback.
    _, signum = await until_signal(lambda: _show(args))
    return for_signal(signum) if signum is not None else Exit.OK


async def _show(args: argparse.Namespace) -> None:
    """Print the session (its status, budgets, error) and its timeline; with ``--follow``, go
    on until the session exits."""
    timeline = Timeline(args)
    async with open_log(args) as log:
        key = await resolve_session(log, args.session)
        if args.tail:
            events = await log.read_last(key, list(EventKind), args.tail)
            total = await log.count(key)
        else:
            events = await log.read(key)
            total = len(events)
        if not events and not (args.json or args.follow):
            raise CliError(f"session {key} has no events")
        view = await view_of(log, await summary_of(log, key, events), utcnow())
        if args.json and not args.follow:
            emit_json([event_to_dict(e) for e in events])
            return
        if not args.json:
            shown = f"{len(events)} of {total}" if len(events) < total else f"{total}"
            print(f"session {key}: {shown} event{'' if total == 1 else 's'}")
            for line in header_lines(view, utcnow(), utc=args.utc):
                print(line)
            sys.stdout.flush()
        try:
            for event in events:
                timeline.add(event)
            if args.follow:
                await follow(log, key, events[-1].seq if events else 0, timeline)
        finally:
            timeline.flush()


async def summary_of(log: EventLog, key: SessionKey, events: Sequence[Event]) -> SessionSummary:
    """The session's summary in the log; for one that has written no checkpoint yet (a store
    lists it once it has one), what its events say: no totals yet, updated at its newest."""
    for summary in await log.sessions():
        if summary.key == key:
            return summary
    updated = events[-1].at if events else utcnow()
    return SessionSummary(key, 0, 0.0, None, None, updated, 0)


def header_lines(view: SessionView, now: datetime, *, utc: bool) -> list[str]:
    """The lines above the timeline: the status and what it means now, the budgets and what
    is left of them, the error behind a failed turn or run."""
    ending = view.ending
    if view.activity is not None:
        status = f"{view.status}: {activity_text(view.activity, now, utc=utc)}"
    elif view.blocked is not None:
        status = f"{view.status}: {view.blocked.text}"
    elif view.status in ("deferred", "due") and view.summary.next_wake_at is not None:
        status = f"{view.status}: wakes {show_wake(view.summary.next_wake_at, now, utc=utc)}"
    elif ending is not None and ending.stop_reason and ending.stop_reason != view.status:
        status = f"{view.status} ({ending.stop_reason})"
    else:
        status = view.status
    lines = [f"status    {status}"]
    cp = view.checkpoint
    lines.append(f"budgets   {budgets_text(cp.budgets if cp else None, cp)}")
    error = error_of(ending)
    if error:
        lines.append(f"error     {error}")
    return lines


def budgets_text(budgets: Budgets | None, cp: Checkpoint | None) -> str:
    """Each budget that is set, with what is used and left of it: ``3 of 5 turns (2 left),
    $0.125000 of $0.500000 ($0.375000 left), 1m 00s of wall-clock per run``."""
    if budgets is None:
        return "none recorded (the session is older than recorded budgets)"
    left = budgets_left(budgets, cp) or {}
    used = cp if cp is not None else Checkpoint(0, 0, 0, 0.0, "")
    parts = []
    if budgets.max_turns:
        parts.append(f"{used.turns} of {budgets.max_turns} turns ({left['turns']} left)")
    if budgets.max_input_tokens:
        parts.append(
            f"{used.input_tokens:,} of {budgets.max_input_tokens:,} input tokens"
            f" ({left['input_tokens']:,} left)"
        )
    if budgets.max_output_tokens:
        parts.append(
            f"{used.output_tokens:,} of {budgets.max_output_tokens:,} output tokens"
            f" ({left['output_tokens']:,} left)"
        )
    if budgets.max_cost_usd:
        parts.append(
            f"${used.cost_usd:.6f} of ${budgets.max_cost_usd:.6f} (${left['cost_usd']:.6f} left)"
        )
    if budgets.max_wallclock:
        parts.append(f"{show_span(budgets.max_wallclock)} of wall-clock per run")
    return ", ".join(parts) or "no caps"


async def follow(log: EventLog, key: SessionKey, after: int, timeline: Timeline) -> None:
    """Print the session's events after seq ``after`` as they come, until it has exited."""
    while True:
        # The lease first, then the events: a run that let go of it has written its exit.
        ended = await _exited(log, key)
        new = await log.read(key, after_seq=after)
        for event in new:
            timeline.add(event)
            after = event.seq
        if ended:
            return
        if not new:  # a checkpoint held over a quiet poll is not half of an exit: show it
            timeline.flush()
        await anyio.sleep(FOLLOW_POLL)


async def _exited(log: EventLog, key: SessionKey) -> bool:
    """Whether the session has a checkpoint and nobody alive holds it (it exited or crashed)."""
    for summary in await log.sessions():
        if summary.key == key:
            return summary.checkpoint_seq > 0 and not held(summary)
    return False  # no checkpoint yet: a run is starting


class Timeline:
    """Prints events as timeline lines (JSON lines with ``--json``, every event as stored).

    An exit writes its turn's checkpoint and then the final one (a pause, a stop or a daemon's
    hand-back may add one too): checkpoints of the same turn one after another are shown as
    one line, the newest, which is what the session's state became."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._json = bool(args.json)
        self._width = None if args.full else args.width
        self._utc = bool(args.utc)
        self._held: Event | None = None  # a checkpoint the next event may replace

    def add(self, event: Event) -> None:
        """Show ``event`` (a checkpoint waits for the next event, which may fold it)."""
        if self._json:
            emit_json(event_to_dict(event))
            return
        held, self._held = self._held, None
        if held is not None and not _same_exit(held, event):
            self._print(held)
        if isinstance(event.payload, Checkpoint):
            self._held = event
        else:
            self._print(event)

    def flush(self) -> None:
        """Show the checkpoint held back, if any."""
        if self._held is not None:
            self._print(self._held)
            self._held = None

    def _print(self, event: Event) -> None:
        print(timeline_line(event, self._width, utc=self._utc), flush=True)


def _same_exit(first: Event, second: Event) -> bool:
    """Whether ``second`` is the final checkpoint that follows ``first``, its turn's one."""
    a, b = first.payload, second.payload
    return isinstance(a, Checkpoint) and isinstance(b, Checkpoint) and a.turns == b.turns


def timeline_line(event: Event, width: int | None, *, utc: bool = False) -> str:
    """One event as a timeline line: seq, time (date and zone), kind, author, what it says."""
    when = show_time(event.at, utc=utc)
    text = one_line(describe(event.payload, utc=utc), width)
    return f"{event.seq:>6}  {when}  {event.kind.value:<17} {event.author or '-':<12}  {text}"


def describe(payload: Any, *, utc: bool = False) -> str:
    """What an event says, in words (the content as stored; the caller shortens it)."""
    if isinstance(payload, UserMessage | AssistantMessage):
        calls = getattr(payload, "tool_calls", ())
        asked = "".join(f" -> {c.name}({_arguments(c.arguments)})" for c in calls)
        return f"[turn {payload.turn}] {payload.text}{asked}"
    if isinstance(payload, ToolResult):
        return f"[turn {payload.turn}] {payload.name} {payload.outcome}: {payload.content}"
    if isinstance(payload, InboxQueued):
        return f"{payload.text}{_by(payload.caller)}"
    if isinstance(payload, InboxDelivered):
        return f"[turn {payload.turn}] {len(payload.message_ids)} inbox message(s) delivered"
    if isinstance(payload, Control):
        detail = f": {payload.detail}" if payload.detail else ""
        return f"{payload.action}{_by(payload.caller)}{detail}"
    if isinstance(payload, Schedule):
        wake = show_time(payload.wake_at, utc=utc)
        return f"[turn {payload.turn}] wake at {wake}: {payload.next_prompt}"
    if isinstance(payload, Checkpoint):
        return _describe_checkpoint(payload, utc=utc)
    if isinstance(payload, PermissionDecision):
        verdict = "allowed" if payload.allowed else "denied"
        return f"[turn {payload.turn}] {payload.tool} {verdict}: {payload.reason}"
    if isinstance(payload, Budgets):
        return f"budgets: {caps_text(payload)}"
    if isinstance(payload, Note):
        return f"{payload.text} {key_values(payload.data)}" if payload.data else payload.text
    if attrs.has(type(payload)):  # a payload kind this code does not describe yet
        return f"{type(payload).__name__} {key_values(attrs.asdict(payload))}"
    return str(payload)


def key_values(data: Mapping[str, Any], sep: str = " ") -> str:
    """``key=value`` pairs, each value as JSON: ``spec="a.toml" model=null n=3``."""
    return sep.join(
        f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in data.items()
    )


def _arguments(arguments: str) -> str:
    """A tool call's JSON arguments as ``key=value`` pairs (as they came when not an object)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    return key_values(parsed, ", ") if isinstance(parsed, dict) else arguments


def _describe_checkpoint(cp: Checkpoint, *, utc: bool) -> str:
    """A checkpoint's totals, stop reason and wake time."""
    parts = [
        f"turns={cp.turns}",
        f"tokens={cp.input_tokens}/{cp.output_tokens}",
        f"cost={cost_text(cp.cost_usd, unpriced=cp.unpriced)}",
    ]
    if cp.cached_input_tokens:  # the part of the input read from the provider's prompt cache
        parts.insert(2, f"cached={cp.cached_input_tokens}")
    if cp.stop_reason:
        parts.append(f"stop={cp.stop_reason}")
    if cp.next_wake_at:
        parts.append(f"wake={show_time(cp.next_wake_at, utc=utc)}")
    if cp.done_detail:
        parts.append(f"detail={json.dumps(cp.done_detail, ensure_ascii=False)}")
    if cp.error:
        parts.append(f"error={json.dumps(cp.error, ensure_ascii=False)}")
    return " ".join(parts)


def caps_text(budgets: Budgets) -> str:
    """The caps that are set, in words: ``5 turns, $0.5, 1m 00s of wall-clock per run``."""
    parts = []
    if budgets.max_turns:
        parts.append(f"{budgets.max_turns} turns")
    if budgets.max_input_tokens:
        parts.append(f"{budgets.max_input_tokens:,} input tokens")
    if budgets.max_output_tokens:
        parts.append(f"{budgets.max_output_tokens:,} output tokens")
    if budgets.max_cost_usd:
        parts.append(f"${decimal_text(usd(budgets.max_cost_usd))}")
    if budgets.max_wallclock:
        parts.append(f"{show_span(budgets.max_wallclock)} of wall-clock per run")
    return ", ".join(parts) or "no caps"


def _by(caller: Originator | None) -> str:
    """`` (from identity)`` for a known caller."""
    if caller is None or not caller.identity:
        return ""
    return f" (from {caller.identity}{', admin' if caller.admin else ''})"
