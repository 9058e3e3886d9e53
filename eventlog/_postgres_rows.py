"""How PostgresEventLog reads its rows back: events, session summaries, leases and claims."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from . import _summary_rows as rows
from ._codec import decode_payload
from ._events import Event, EventKind, SessionKey
from ._postgres_text import unescape
from ._rules import as_utc
from ._store import LeaseHolder, SessionSummary
from ._summary_rows import Decoding


def event_from_row(row: Sequence[Any], key: SessionKey) -> Event:
    """The event of session ``key`` stored in ``row``; an unreadable row raises
    :class:`~eventlog.CorruptEvent`."""
    seq, event_id, kind, author, at, v, payload = row
    event_id = unescape(event_id)
    decoded = decode_payload(kind, payload, v=v, session=str(key), seq=seq, event_id=event_id)
    return Event(
        key=key,
        kind=EventKind(kind),
        payload=decoded,
        author=unescape(author),
        at=as_utc(at),
        id=event_id,
        seq=seq,
        v=v,
    )


#: How this store's columns read back: U+0000 escaped in text, times as the server gives them.
DECODING = Decoding(text=unescape, time=as_utc)
#: A session summary from a summary row (see :func:`~eventlog._summary_rows.summary_from_row`).
summary_from_row = functools.partial(rows.summary_from_row, decoding=DECODING)
#: A :data:`SELECT_SESSIONS` row as the summary it lists, with its checkpoint.
listed_from_row = functools.partial(rows.listed_from_row, decoding=DECODING)
#: A :data:`SELECT_LEASE` row as (holder, expiry, epoch).
lease_of_row = functools.partial(rows.lease_of_row, decoding=DECODING)
#: Why a lease is no longer ours, from the session's :data:`SELECT_LEASE` row.
lost_detail = functools.partial(rows.lost_detail, decoding=DECODING)


def holder_params(holder: LeaseHolder) -> dict[str, Any]:
    """The holder columns' parameters of a lease holder."""
    return {
        "host": holder.host,
        "pid": holder.pid,
        "token": holder.token,
        "started": holder.started,
    }


def claim_from_row(
    row: Sequence[Any], holder: LeaseHolder, expires_at: datetime
) -> tuple[SessionSummary, int, int]:
    """A :data:`CLAIM_DUE` row as (the claimed summary, the new epoch, the log's newest seq);
    its notice and its count of notifications are not read."""
    *columns, epoch, log_seq, _, _ = row
    summary = summary_from_row([*columns, None, None, None])
    return attrs.evolve(summary, holder=str(holder)), epoch, log_seq
