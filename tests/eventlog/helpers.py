"""Helpers the eventlog tests share."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from eventlog import Event, EventLog, Lease


async def add(log: EventLog, events: Sequence[Event]) -> list[Event]:
    """Append ``events`` and return them as the log now holds them: with their seqs."""
    seqs = await log.append(events)
    assert len(events) == len(seqs)
    return [attrs.evolve(event, seq=seq) for event, seq in zip(events, seqs, strict=True)]


async def add_fenced(log: EventLog, events: Sequence[Event], lease: Lease) -> list[Event]:
    """Append ``events`` fenced by ``lease``; return them as the log now holds them."""
    seqs = await log.append(events, lease=lease)
    assert len(events) == len(seqs)
    return [attrs.evolve(event, seq=seq) for event, seq in zip(events, seqs, strict=True)]
