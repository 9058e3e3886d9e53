"""``ls``, ``show``, ``inject``, ``pause``, ``unpause`` and ``stop``: look at sessions in the log
and control them from this process (a running session obeys within about a second)."""

from __future__ import annotations

import argparse
import getpass
from datetime import datetime
from typing import Any

from eventlog import (
    AssistantMessage,
    Checkpoint,
    Control,
    Event,
    EventKind,
    InboxDelivered,
    InboxQueued,
    Note,
    Originator,
    PermissionDecision,
    Schedule,
    SessionSummary,
    ToolResult,
    UserMessage,
    event_to_dict,
    utcnow,
)
from permissions import Caller

from .._remote import send_control, send_inject
from ._common import (
    CliError,
    cli_errors,
    emit_json,
    holder_gone,
    one_line,
    open_log,
    require_session,
    resolve_session,
)
from ._exits import Exit

#: The control action each command sends.
CONTROL_ACTIONS = {"pause": "pause", "unpause": "resume", "stop": "stop"}
_FAILED = {"retry_policy_aborted", "lease_lost"}


def status_of(summary: SessionSummary, now: datetime) -> str:
    """A session's state in one word, from its latest checkpoint and its lease."""
    reason = summary.stop_reason
    if summary.holder and not holder_gone(summary.holder):
        return "paused" if summary.paused else "running"
    if summary.stopped:
        return "stopped"
    if summary.paused:
        return "paused"  # a pause request waits for the next resume (or an unpause)
    if reason is None or reason == "context_cancelled":
        return "interrupted"  # a crash, or a signal: resumable as it is
    if reason == "deferred":
        wake = summary.next_wake_at
        return "due" if wake is not None and wake <= now else "deferred"
    if reason == "completed":
        return "completed"
    return "failed" if reason in _FAILED else "stopped"


def summary_dict(summary: SessionSummary, now: datetime) -> dict[str, Any]:
    """One ``ls --json`` row."""
    wake = summary.next_wake_at
    return {
        "session": str(summary.key),
        "app": summary.key.app,
        "user": summary.key.user,
        "session_id": summary.key.session_id,
        "status": status_of(summary, now),
        "stop_reason": summary.stop_reason,
        "turns": summary.turns,
        "cost_usd": summary.cost_usd,
        "next_wake_at": wake.isoformat() if wake else None,
        "holder": summary.holder,
        "updated_at": summary.updated_at.isoformat(),
    }


async def cmd_ls(args: argparse.Namespace) -> int:
    """List the sessions of the log, newest first."""
    async with open_log(args) as log:
        rows = [summary_dict(s, utcnow()) for s in await log.sessions()]
    if args.json:
        emit_json(rows)
        return Exit.OK
    if not rows:
        print("no sessions")
        return Exit.OK
    header = ("SESSION", "STATUS", "STOP REASON", "TURNS", "COST", "NEXT WAKE", "HOLDER")
    table = [header] + [
        (
            r["session"],
            r["status"],
            r["stop_reason"] or "-",
            str(r["turns"]),
            f"${r['cost_usd']:.6f}",
            _short_time(r["next_wake_at"]),
            r["holder"] or "-",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return Exit.OK


def _short_time(iso: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS`` (or ``-``)."""
    return iso[:19].replace("T", " ") if iso else "-"


async def cmd_show(args: argparse.Namespace) -> int:
    """Print the timeline of one session's events."""
    async with open_log(args) as log:
        key = await resolve_session(log, args.session)
        if args.tail:
            events = await log.read_last(key, list(EventKind), args.tail)
        else:
            events = await log.read(key)
    if args.json:
        emit_json([event_to_dict(e) for e in events])
        return Exit.OK
    if not events:
        raise CliError(f"session {key} has no events")
    print(f"session {key}: {len(events)} event(s)")
    width = None if args.full else args.width
    for event in events:
        print(timeline_line(event, width))
    return Exit.OK


def timeline_line(event: Event, width: int | None) -> str:
    """One event as a timeline line: seq, time, kind, author and what it says."""
    when = event.at.strftime("%H:%M:%S")
    text = one_line(describe(event.payload), width)
    return f"{event.seq:>6}  {when}  {event.kind.value:<17} {event.author or '-':<12}  {text}"


def describe(payload: Any) -> str:
    """What an event says, in words (the content as stored; the caller shortens it)."""
    if isinstance(payload, UserMessage | AssistantMessage):
        calls = getattr(payload, "tool_calls", ())
        asked = "".join(f" -> {c.name}({c.arguments})" for c in calls)
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
        return f"[turn {payload.turn}] wake at {payload.wake_at.isoformat()}: {payload.next_prompt}"
    if isinstance(payload, Checkpoint):
        return _describe_checkpoint(payload)
    if isinstance(payload, PermissionDecision):
        verdict = "allowed" if payload.allowed else "denied"
        return f"[turn {payload.turn}] {payload.tool} {verdict}: {payload.reason}"
    if isinstance(payload, Note):
        return f"{payload.text} {payload.data}" if payload.data else payload.text
    return repr(payload)


def _describe_checkpoint(cp: Checkpoint) -> str:
    """A checkpoint's totals, stop reason and wake time."""
    parts = [
        f"turns={cp.turns}",
        f"tokens={cp.input_tokens}/{cp.output_tokens}",
        f"cost=${cp.cost_usd:.6f}",
    ]
    if cp.stop_reason:
        parts.append(f"stop={cp.stop_reason}")
    if cp.next_wake_at:
        parts.append(f"wake={cp.next_wake_at.isoformat()}")
    if cp.done_detail:
        parts.append(f"detail={cp.done_detail!r}")
    return " ".join(parts)


def _by(caller: Originator | None) -> str:
    """`` (from identity)`` for a known caller."""
    if caller is None or not caller.identity:
        return ""
    return f" (from {caller.identity}{', admin' if caller.admin else ''})"


def caller_of(args: argparse.Namespace) -> Caller:
    """The caller a control command records: ``--as`` (default: the OS user), labels, admin."""
    labels: dict[str, str] = {}
    for item in getattr(args, "label", None) or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--label {item!r}: use key=value")
        labels[name] = value
    identity = args.as_identity or _os_user()
    return Caller(identity=identity, labels=labels, admin=bool(getattr(args, "admin", False)))


def _os_user() -> str:
    """The login name of this process's user, or "" when unknown."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return ""


async def cmd_inject(args: argparse.Namespace) -> int:
    """Append an inbox message to a session (durable when this returns)."""
    caller = caller_of(args)
    async with open_log(args) as log:
        key = await resolve_session(log, args.session)
        await require_session(log, key)
        with cli_errors():
            message_id = await send_inject(log, key, args.text, caller=caller, via="cli")
    if args.json:
        emit_json({"session": str(key), "message_id": message_id})
    else:
        print(f"queued message {message_id} for {key}")
    return Exit.OK


async def cmd_control(args: argparse.Namespace) -> int:
    """Send pause (``pause``), resume (``unpause``) or stop (``stop``) to a session."""
    action = CONTROL_ACTIONS[args.command]
    caller = caller_of(args)
    async with open_log(args) as log:
        key = await resolve_session(log, args.session)
        await require_session(log, key)
        with cli_errors():
            await send_control(log, key, action, caller=caller, via="cli")
    if args.json:
        emit_json({"session": str(key), "action": action})
    else:
        print(f"sent {action} to {key}")
    return Exit.OK
