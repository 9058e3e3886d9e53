"""How PostgresEventLog reads its rows back: events, session summaries, leases and claims."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from ._codec import decode_payload
from ._events import Event, EventKind, SessionKey
from ._postgres_text import key_of, unescape
from ._rules import as_utc
from ._store import LeaseHolder, SessionSummary


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


def summary_from_row(row: Sequence[Any]) -> SessionSummary:
    """A session summary (with its live lease holder, if any) from a summary row."""
    app, user, session_id, turns, cost, reason, wake, updated, seq, *flags, host, pid, token = row
    paused, stopped, unpriced, input_tokens, cached_input_tokens = flags
    return SessionSummary(
        key=key_of(app, user, session_id),
        turns=turns,
        cost_usd=cost,
        stop_reason=None if reason is None else unescape(reason),
        next_wake_at=None if wake is None else as_utc(wake),
        updated_at=as_utc(updated),
        checkpoint_seq=seq,
        holder=None if host is None or token is None else str(LeaseHolder(host, pid, token)),
        paused=paused,
        stopped=stopped,
        unpriced=unpriced,
        input_tokens=input_tokens,
        cached_input_tokens=cached_input_tokens,
    )


def holder_params(holder: LeaseHolder) -> dict[str, Any]:
    """The holder columns' parameters of a lease holder."""
    return {
        "host": holder.host,
        "pid": holder.pid,
        "token": holder.token,
        "started": holder.started,
    }


def lease_of_row(row: Sequence[Any] | None) -> tuple[LeaseHolder | None, datetime | None, int]:
    """A :data:`SELECT_LEASE` row as (holder, expiry, epoch); no holder for a released lease.

    No row at all is a session never leased: no holder, epoch 0.
    """
    if row is None:
        return None, None, 0
    host, pid, token, started, expires_at, epoch = row
    if token is None:
        return None, None, epoch
    return LeaseHolder(host, pid, token, started), as_utc(expires_at), epoch


def lost_detail(row: Sequence[Any] | None) -> str:
    """Why a lease is no longer ours, from the session's :data:`SELECT_LEASE` row."""
    current, _, epoch = lease_of_row(row)
    return "released" if current is None else f"now held by {current} (epoch {epoch})"


def claim_from_row(
    row: Sequence[Any], holder: LeaseHolder, expires_at: datetime
) -> tuple[SessionSummary, int, int]:
    """A :data:`CLAIM_DUE` row as (the claimed summary, the new epoch, the log's newest seq)."""
    *columns, epoch, log_seq, _ = row
    summary = summary_from_row([*columns, None, None, None])
    return attrs.evolve(summary, holder=str(holder)), epoch, log_seq
