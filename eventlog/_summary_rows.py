"""Session summary and lease rows as both durable logs read them back: the columns' order in
one place, each store's text and time decoding passed in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import attrs

from ._errors import CorruptEvent
from ._events import Checkpoint, EventKind, SessionKey
from ._store import LeaseHolder, SessionSummary
from .codec import decode_payload

#: How many columns a summary row has: the session's fourteen, then its live lease's holder.
SUMMARY_ROW_WIDTH = 17


@attrs.frozen
class Decoding:
    """How a store's columns read back: its stored text (keys, a stop reason) and its times."""

    text: Callable[[str], str]
    time: Callable[[Any], datetime]


def summary_from_row(
    row: Sequence[Any], decoding: Decoding, checkpoint: Checkpoint | None = None
) -> SessionSummary:
    """A session summary (with its live lease holder, if any) from a summary row: the
    session's columns, then its live lease's host, pid and token (NULLs: none)."""
    app, user, session_id, turns, cost, reason, wake, updated, seq, *flags, host, pid, token = row
    paused, stopped, unpriced, input_tokens, cached_input_tokens = flags
    text, time = decoding.text, decoding.time
    return SessionSummary(
        key=SessionKey(text(app), text(user), text(session_id)),
        turns=turns,
        cost_usd=cost,
        stop_reason=None if reason is None else text(reason),
        next_wake_at=None if wake is None else time(wake),
        updated_at=time(updated),
        checkpoint_seq=seq,
        holder=None if host is None or token is None else str(LeaseHolder(host, pid, token)),
        paused=bool(paused),
        stopped=bool(stopped),
        unpriced=bool(unpriced),
        input_tokens=input_tokens,
        cached_input_tokens=cached_input_tokens,
        checkpoint=checkpoint,
    )


def listed_from_row(row: Sequence[Any], decoding: Decoding) -> SessionSummary:
    """A session as :meth:`EventLog.sessions` lists it, from a summary row followed by its
    latest checkpoint row's schema version and payload (NULLs: no checkpoint).

    A checkpoint that cannot be decoded (not JSON, a newer schema, a field of the wrong type)
    leaves ``checkpoint`` None: one damaged row must not hide every session from a listing,
    and the session is still listed as its summary columns say (reading the checkpoint itself
    raises :class:`CorruptEvent`, as it should).
    """
    v, payload = row[SUMMARY_ROW_WIDTH:]
    checkpoint = None
    if payload is not None:
        try:
            decoded = decode_payload(EventKind.CHECKPOINT, payload, v=v)
        except CorruptEvent:
            decoded = None
        if isinstance(decoded, Checkpoint):
            checkpoint = decoded
    return summary_from_row(row[:SUMMARY_ROW_WIDTH], decoding, checkpoint)


def lease_of_row(
    row: Sequence[Any] | None, decoding: Decoding
) -> tuple[LeaseHolder | None, datetime | None, int]:
    """A lease row (host, pid, token, start time, expiry, epoch) as (holder, expiry, epoch);
    no holder for a released lease (no token). No row at all is a session never leased: no
    holder, epoch 0."""
    if row is None:
        return None, None, 0
    host, pid, token, started, expires_at, epoch = row
    if not token:
        return None, None, epoch
    return LeaseHolder(host, pid, token, started), decoding.time(expires_at), epoch


def lost_detail(row: Sequence[Any] | None, decoding: Decoding) -> str:
    """Why a lease is no longer ours, from the session's lease row."""
    current, _, epoch = lease_of_row(row, decoding)
    return "released" if current is None else f"now held by {current} (epoch {epoch})"
