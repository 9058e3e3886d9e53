"""MemoryEventLog: the in-process store, for tests and runs that need not outlive the process."""

from __future__ import annotations

import socket
from bisect import bisect_right
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from itertools import islice
from types import TracebackType
from typing import Self

import attrs

from ._errors import LeaseLost, SessionLocked, StoreUnavailable
from ._events import Event, EventKind, SessionKey, utcnow
from ._rules import as_utc, check_limit, is_due, lease_expiry, may_take_lease, summary_of
from ._store import Clock, Lease, LeaseHolder, SessionSummary


def _seq_of(event: Event) -> int:
    return event.seq


class MemoryEventLog:
    """An :class:`~eventlog.EventLog` that keeps events as objects in this process.

    Appending is cheap (no encoding, no I/O) and atomic: a batch is added with no ``await`` in
    between, so other tasks see all of it or none of it. Events are kept per session, the latest
    checkpoint and the session summary per session, so reads never scan other sessions. Leases
    follow the same rules as :class:`~eventlog.SqliteEventLog`'s. Nothing survives the process.

    ``clock`` gives the current UTC time for leases and the ``holder`` of :meth:`sessions`.
    """

    durable: bool = False

    def __init__(self, *, clock: Clock = utcnow) -> None:
        self._clock = clock
        self._host = socket.gethostname()
        self._seq = 0
        self._events: dict[SessionKey, list[Event]] = {}
        self._checkpoints: dict[SessionKey, Event] = {}
        self._summaries: dict[SessionKey, SessionSummary] = {}
        self._leases: dict[SessionKey, Lease] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryEventLog(events={self._seq}, sessions={len(self._events)})"

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the log; idempotent. A closed log refuses every further call."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable("this MemoryEventLog is closed")

    async def append(self, events: Sequence[Event]) -> list[Event]:
        """Append ``events`` atomically, in order; returns them with their assigned ``seq``."""
        self._check_open()
        seq = self._seq
        appended: list[Event] = []
        checkpoints: list[tuple[Event, SessionSummary]] = []
        for event in events:
            seq += 1
            stored = Event(
                key=event.key,
                kind=event.kind,
                payload=event.payload,
                author=event.author,
                at=event.at,
                id=event.id,
                seq=seq,
                v=event.v,
            )
            appended.append(stored)
            if stored.kind == EventKind.CHECKPOINT:
                checkpoints.append((stored, summary_of(stored)))
        # Everything that can fail has run; from here on the batch lands whole.
        self._seq = seq
        by_session = self._events
        key: SessionKey | None = None
        bucket: list[Event] = []
        for stored in appended:
            if stored.key is not key:  # batches are mostly one session: hash its key once
                key = stored.key
                bucket = by_session.setdefault(key, [])
            bucket.append(stored)
        for stored, summary in checkpoints:
            self._checkpoints[stored.key] = stored
            self._summaries[stored.key] = summary
        return appended

    async def read(
        self,
        key: SessionKey,
        *,
        after_seq: int = 0,
        kinds: Collection[EventKind] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Events of one session with ``seq > after_seq``, oldest first, optionally filtered."""
        self._check_open()
        check_limit(limit)
        bucket = self._events.get(key, [])
        start = bisect_right(bucket, after_seq, key=_seq_of)
        found: Iterator[Event] = iter(bucket[start:])
        if kinds is not None:
            wanted = frozenset(kinds)
            found = (event for event in found if event.kind in wanted)
        return list(islice(found, limit))

    async def read_last(
        self, key: SessionKey, kinds: Collection[EventKind], limit: int
    ) -> list[Event]:
        """The newest ``limit`` events of the given kinds of one session, oldest first."""
        self._check_open()
        check_limit(limit)
        wanted = frozenset(kinds)
        newest = (event for event in reversed(self._events.get(key, [])) if event.kind in wanted)
        found = list(islice(newest, limit))
        found.reverse()
        return found

    async def latest_checkpoint(self, key: SessionKey) -> Event | None:
        """The session's newest checkpoint event, or ``None``."""
        self._check_open()
        return self._checkpoints.get(key)

    async def sessions(self) -> list[SessionSummary]:
        """Every session that has written a checkpoint, newest first, with its live holder."""
        self._check_open()
        newest = sorted(self._summaries.values(), key=lambda s: s.checkpoint_seq, reverse=True)
        return [self._with_holder(summary) for summary in newest]

    async def due_sessions(self, now: datetime) -> list[SessionSummary]:
        """Sessions whose latest checkpoint is ``deferred`` with ``next_wake_at <= now``.

        Earliest wake time first.
        """
        self._check_open()
        due = [summary for summary in self._summaries.values() if is_due(summary, now)]
        due.sort(key=lambda s: (s.next_wake_at, s.checkpoint_seq))
        return [self._with_holder(summary) for summary in due]

    def _with_holder(self, summary: SessionSummary) -> SessionSummary:
        lease = self._leases.get(summary.key)
        if lease is None or lease.expires_at <= as_utc(self._clock()):
            return summary
        return attrs.evolve(summary, holder=str(lease.holder))

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Take the session's lease for ``ttl`` seconds or raise :class:`SessionLocked`."""
        self._check_open()
        now = as_utc(self._clock())
        expires_at = lease_expiry(now, ttl)
        current = self._leases.get(key)
        if current is not None and not may_take_lease(
            current.holder, current.expires_at, holder, now, this_host=self._host
        ):
            raise SessionLocked(str(key), str(current.holder))
        lease = Lease(key=key, holder=holder, expires_at=expires_at)
        self._leases[key] = lease
        return lease

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend our lease or raise :class:`LeaseLost` when it is no longer ours."""
        self._check_open()
        expires_at = lease_expiry(self._clock(), ttl)
        current = self._leases.get(lease.key)
        if current is None or current.holder != lease.holder:
            detail = "released" if current is None else f"now held by {current.holder}"
            raise LeaseLost(str(lease.key), detail)
        renewed = Lease(key=lease.key, holder=lease.holder, expires_at=expires_at)
        self._leases[lease.key] = renewed
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        """Drop our lease (never another holder's); releasing twice is harmless."""
        self._check_open()
        current = self._leases.get(lease.key)
        if current is not None and current.holder.token == lease.holder.token:
            del self._leases[lease.key]
