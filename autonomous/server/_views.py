"""What the API shows of sessions and events: ``ls --json``'s rows, events as ``show --json``
has them, and the content a viewer may not read taken out of both."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from eventlog import Event, EventKind, EventLog, SessionKey
from eventlog.codec import event_to_dict

from .._cli._common import spec_note
from .._cli._ls import summary_dict
from .._cli._show import summary_of
from .._cli._view import SessionView, view_of

#: The fields of each event kind's payload that are content: what the model or a person
#: wrote, tool arguments and results. A viewer sees the event without them.
_CONTENT: Mapping[str, tuple[str, ...]] = {
    EventKind.USER_MESSAGE: ("text",),
    EventKind.ASSISTANT_MESSAGE: ("text",),
    EventKind.TOOL_RESULT: ("content",),
    EventKind.INBOX_QUEUED: ("text",),
    EventKind.HISTORY_SUMMARY: ("text",),
    EventKind.SCHEDULE: ("next_prompt",),
    EventKind.CHECKPOINT: ("next_prompt", "final_text", "result", "goal", "done_detail"),
}
#: The fields of a session row that are content (how the model ended its run, in its words).
_SESSION_CONTENT = ("result", "final_text", "done_detail")


def event_dict(event: Event, *, content: bool) -> dict[str, Any]:
    """An event as the API answers it: ``show --json``'s form (seq, kind, author, payload...)
    with ``time``; without its content unless ``content``."""
    data = event_to_dict(event)
    data["time"] = data["at"]
    if not content:
        data["payload"] = _without_content(str(event.kind), data["payload"])
    return data


def _without_content(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` of an event of ``kind`` without the fields that are content."""
    kept = {k: v for k, v in payload.items() if k not in _CONTENT.get(kind, ())}
    if kind == EventKind.ASSISTANT_MESSAGE and "tool_calls" in kept:
        kept["tool_calls"] = [
            {k: v for k, v in call.items() if k != "arguments"} for call in kept["tool_calls"]
        ]
    return kept


def session_dict(view: SessionView, *, content: bool) -> dict[str, Any]:
    """One session as ``autonomous ls --json`` shows it (the same row), without the words of
    its ending unless ``content``."""
    row = summary_dict(view)
    row["paused"] = view.summary.paused
    row["stopped"] = view.summary.stopped
    if not content:
        for name in _SESSION_CONTENT:
            row.pop(name, None)
    return row


async def session_detail(
    log: EventLog, key: SessionKey, now: datetime, *, content: bool
) -> dict[str, Any]:
    """One session in full: its ``ls`` row (status, totals, budgets and what is left of them,
    next wake, holder, last error) and the spec it runs (path and digest, None when it was
    started from Python)."""
    summary = await summary_of(log, key, await log.read_last(key, list(EventKind), 1))
    row = session_dict(await view_of(log, summary, now), content=content)
    note = await spec_note(log, key)
    row["spec"] = {"path": note.get("spec"), "digest": note.get("digest")} if note else None
    row["checkpoint_seq"] = summary.checkpoint_seq
    return row
