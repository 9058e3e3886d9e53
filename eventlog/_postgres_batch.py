"""A batch of events as the parameters of PostgresEventLog's one append statement: the rows,
and what the batch does to each session's row (its summary, the lease, notifications)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from ._codec import encode_payload
from ._events import Event, EventKind, SessionKey
from ._postgres_sql import escape, notice
from ._rules import as_utc, control_marks, summary_of

#: Kinds whose append notifies: a run or a daemon may be waiting for them.
NOTIFYING_KINDS = frozenset({EventKind.INBOX_QUEUED, EventKind.CONTROL, EventKind.CHECKPOINT})


@attrs.define
class _Change:
    """What a batch does to one session's row: its last checkpoint (its index in the batch) and
    the marks of the control requests after it."""

    checkpoint: int | None = None
    paused: bool | None = None
    stopped: bool = False


def append_params(
    events: Sequence[Event], sids: dict[SessionKey, int], *, channel: str, release: bool = False
) -> dict[str, Any]:
    """The parameters of :data:`APPEND` for a batch whose sessions' ids are all in ``sids``.

    Raises :class:`TypeError` (before anything is sent) for a checkpoint kind without a
    checkpoint payload.
    """
    e_sid: list[int] = []
    e_id: list[str] = []
    e_kind: list[str] = []
    e_author: list[str] = []
    e_at: list[datetime] = []
    e_v: list[int] = []
    e_payload: list[str] = []
    changes: dict[SessionKey, _Change] = {}
    notify: dict[SessionKey, None] = {}
    for index, event in enumerate(events):
        key = event.key
        e_sid.append(sids[key])
        e_id.append(escape(event.id))
        e_kind.append(str(event.kind))
        e_author.append(escape(event.author))
        e_at.append(as_utc(event.at))
        e_v.append(event.v)
        e_payload.append(encode_payload(event.payload))
        kind = event.kind
        if kind in NOTIFYING_KINDS:
            notify[key] = None
        if kind == EventKind.CHECKPOINT:
            changes[key] = _Change(checkpoint=index)
        elif kind == EventKind.CONTROL:
            paused, stopped = control_marks(event.payload)
            if paused is not None or stopped:
                change = changes.setdefault(key, _Change())
                change.paused = change.paused if paused is None else paused
                change.stopped = change.stopped or stopped
    if release:
        for key in {event.key for event in events}:
            changes.setdefault(key, _Change())
            notify[key] = None
    params: dict[str, Any] = {
        "sids": sorted(set(e_sid)),
        "token": None,
        "epoch": None,
        "e_sid": e_sid,
        "e_id": e_id,
        "e_kind": e_kind,
        "e_author": e_author,
        "e_at": e_at,
        "e_v": e_v,
        "e_payload": e_payload,
        "channel": channel,
        "notify": [notice(key) for key in notify],
    }
    params.update(_change_params(events, sids, changes, release))
    return params


def _change_params(
    events: Sequence[Event],
    sids: dict[SessionKey, int],
    changes: dict[SessionKey, _Change],
    release: bool,
) -> dict[str, list[Any]]:
    """The ``u_*`` arrays of :data:`APPEND`: one entry per session whose row the batch changes."""
    names = [
        "sid",
        "ck",
        "turns",
        "cost",
        "reason",
        "wake",
        "updated",
        "paused",
        "stopped",
        "unpriced",
        "release",
    ]
    columns: dict[str, list[Any]] = {f"u_{name}": [] for name in names}
    for key, change in changes.items():
        row: list[Any] = [sids[key]]
        if change.checkpoint is None:
            row += [None, None, None, None, None, None, change.paused, change.stopped, None]
        else:
            summary = summary_of(events[change.checkpoint], 0)
            row += [
                change.checkpoint + 1,  # the batch's ordinals count from 1
                summary.turns,
                summary.cost_usd,
                summary.stop_reason,
                summary.next_wake_at,
                summary.updated_at,
                summary.paused if change.paused is None else change.paused,
                summary.stopped or change.stopped,
                summary.unpriced,
            ]
        row.append(release)
        for column, value in zip(columns.values(), row, strict=True):
            column.append(value)
    return columns
