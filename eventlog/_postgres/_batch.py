"""A batch of events as the parameters of PostgresEventLog's append statements: the rows, and
what the batch does to each session's row (its summary, the lease, notifications).

A few events of one session that write nothing but their rows (most model calls' batch) go
as plain parameters, one statement per batch size (:data:`APPEND_ROWS`): psycopg adapts
strings, integers and times in C, and the server binds them as they are. Any other batch
goes to :data:`APPEND` as one JSON document (a list of rows, each a list of columns), not as
one array parameter per column: the standard library writes JSON in C, where psycopg adapts
a list in Python, element by element (for the seven text arrays of a two-event batch, ten
times the cost of the statement's commit at ``synchronous_commit = off``), and a JSON
parameter lets the server keep one plan for every batch size (an array's length changes the
plan it picks).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from .._events import Event, EventKind, SessionKey
from .._rules import NO_MARKS, Marks, as_utc, control_marks, summary_of, with_marks
from ..codec import encode_payload
from . import _sql as sql
from ._conn import Params
from ._sql import escape, notice

#: Kinds whose append notifies: a run or a daemon may be waiting for them.
NOTIFYING_KINDS = frozenset({EventKind.INBOX_QUEUED, EventKind.CONTROL, EventKind.CHECKPOINT})


@attrs.define
class _Change:
    """What a batch does to one session's row: its last checkpoint (its index in the batch) and
    the marks of the control requests after it (in the batch)."""

    checkpoint: int | None = None
    marks: Marks = NO_MARKS


def _json(value: Any) -> str:
    """A parameter as JSON text (non-ASCII as is: the server reads UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def append_params(
    events: Sequence[Event],
    sids: dict[SessionKey, int],
    *,
    channel: str,
    fence: tuple[str, int] | None = None,
    release: bool = False,
) -> tuple[str, Params]:
    """The statement a batch whose sessions' ids are all in ``sids`` needs, and its
    parameters, fenced by ``fence`` (a lease's token and epoch) when given: one of
    :data:`APPEND_ROWS` for a few events of one session that write no summary, lease or
    notification (most model calls' batch: it returns a row of each seq, in no order), else
    :data:`APPEND` (it returns one row: the seqs in batch order).

    Raises :class:`TypeError` (before anything is sent) for a checkpoint kind without a
    checkpoint payload.
    """
    key = events[0].key
    if (
        not release
        and len(events) <= sql.ROWS_STATEMENTS
        and all(event.key == key and event.kind not in NOTIFYING_KINDS for event in events)
    ):
        token, epoch = fence if fence is not None else (None, None)
        params: list[Any] = [sids[key], token, token, epoch]
        for event in events:
            params += (
                escape(event.id),
                str(event.kind),
                escape(event.author),
                as_utc(event.at),
                event.v,
                encode_payload(event.payload),
            )
        return sql.APPEND_ROWS[len(events)], params
    return sql.APPEND, _batch_params(events, sids, channel=channel, fence=fence, release=release)


def _batch_params(
    events: Sequence[Event],
    sids: dict[SessionKey, int],
    *,
    channel: str,
    fence: tuple[str, int] | None,
    release: bool,
) -> dict[str, Any]:
    """:data:`APPEND`'s parameters."""
    rows: list[list[Any]] = []
    changes: dict[SessionKey, _Change] = {}
    notify: dict[SessionKey, None] = {}
    for index, event in enumerate(events):
        key = event.key
        kind = event.kind
        rows.append(
            [
                sids[key],
                escape(event.id),
                str(kind),
                escape(event.author),
                as_utc(event.at).isoformat(),
                event.v,
                encode_payload(event.payload),
            ]
        )
        if kind in NOTIFYING_KINDS:
            notify[key] = None
        if kind == EventKind.CHECKPOINT:
            changes[key] = _Change(checkpoint=index)
        elif kind == EventKind.CONTROL:
            change = changes.get(key)
            marks = control_marks(event, NO_MARKS if change is None else change.marks)
            if marks != NO_MARKS:
                changes.setdefault(key, _Change()).marks = marks
    session_ids = sorted({row[0] for row in rows})
    if release:
        for key in {event.key for event in events}:
            changes.setdefault(key, _Change())
            notify[key] = None
    token, epoch = fence if fence is not None else (None, None)
    return {
        "token": token,
        "epoch": epoch,
        "events": _json(rows),
        "sids": session_ids,
        "sessions": len(session_ids),
        "changes": _json(_change_rows(events, sids, changes, release)),
        "channel": channel,
        "notify": _json([notice(key) for key in notify]),
    }


def _change_rows(
    events: Sequence[Event],
    sids: dict[SessionKey, int],
    changes: dict[SessionKey, _Change],
    release: bool,
) -> list[list[Any]]:
    """The rows of :data:`APPEND`'s ``changes``: one per session whose row the batch changes.

    A batch with a checkpoint of the session gives its whole summary, marked here by the
    requests after it (``with_marks``); one without gives the marks alone, which the statement
    applies to the row as it finds it (the wake time only there: ``woken_at``, last).
    """
    rows = []
    for key, change in changes.items():
        row: list[Any] = [sids[key]]
        woken = None
        if change.checkpoint is None:
            marks = change.marks
            row += [None] * 6 + [marks.paused, marks.stopped, None, None, None]
            woken = marks.woken_at
        else:
            summary = with_marks(summary_of(events[change.checkpoint], 0), change.marks)
            wake = summary.next_wake_at
            row += [
                change.checkpoint + 1,  # the batch's ordinals count from 1
                summary.turns,
                repr(summary.cost_usd),  # text: JSON has no NaN nor infinity
                None if summary.stop_reason is None else escape(summary.stop_reason),
                None if wake is None else as_utc(wake).isoformat(),
                as_utc(summary.updated_at).isoformat(),
                summary.paused,
                summary.stopped,
                summary.unpriced,
                summary.input_tokens,
                summary.cached_input_tokens,
            ]
        row += [release, None if woken is None else as_utc(woken).isoformat()]
        rows.append(row)
    return rows
