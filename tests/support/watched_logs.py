"""In-memory logs made durable for the keeper's and the daemon's tests: lease calls counted,
and an in-process ``watch`` notified as PostgresEventLog's LISTEN is."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

import anyio

from eventlog import (
    Claim,
    Clock,
    Event,
    EventKind,
    Lease,
    LeaseHolder,
    MemoryEventLog,
    SessionKey,
    utcnow,
)

#: The kinds whose appends wake a watch (as PostgresEventLog's pg_notify does).
NOTIFYING = frozenset({EventKind.INBOX_QUEUED, EventKind.CONTROL, EventKind.CHECKPOINT})


class FakeWatch:
    """One watch: ``wait`` returns once per burst of notifications since it last returned."""

    def __init__(self) -> None:
        self._changed = anyio.Event()
        self.waits = 0

    def notify(self) -> None:
        """Something changed (coalesced with what came before the next wait returns)."""
        self._changed.set()

    async def wait(self) -> None:
        """Return when notified since the watch began or since the last wait returned."""
        self.waits += 1
        await self._changed.wait()
        self._changed = anyio.Event()


class LeaseCountingLog(MemoryEventLog):
    """A durable in-memory log that counts its lease calls (in ``calls``)."""

    durable = True

    def __init__(self, *, clock: Clock = utcnow) -> None:
        super().__init__(clock=clock)
        self.calls: Counter[str] = Counter()

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Count, then acquire."""
        self.calls["acquire_lease"] += 1
        return await super().acquire_lease(key, holder, ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Count, then renew."""
        self.calls["renew_lease"] += 1
        return await super().renew_lease(lease, ttl)

    async def release_lease(self, lease: Lease) -> None:
        """Count, then release."""
        self.calls["release_lease"] += 1
        await super().release_lease(lease)


class WatchedLog(LeaseCountingLog):
    """Adds ``watch(key)``: the appends of ``notifying`` kinds, lease releases and claims
    wake the watches of their session and those of every session."""

    def __init__(self, *, clock: Clock = utcnow) -> None:
        super().__init__(clock=clock)
        self.watches: list[tuple[SessionKey | None, FakeWatch]] = []
        self.notifying = NOTIFYING

    @contextlib.asynccontextmanager
    async def watch(self, key: SessionKey | None = None) -> AsyncIterator[FakeWatch]:
        """Watch one session (None: every session) while the block is open."""
        entry = (key, FakeWatch())
        self.watches.append(entry)
        try:
            yield entry[1]
        finally:
            self.watches.remove(entry)

    def notify(self, changed: SessionKey) -> None:
        """Wake the watches of ``changed`` and those of every session."""
        for key, watch in self.watches:
            if key in (None, changed):
                watch.notify()

    async def append(self, events: Sequence[Event], *, lease: Lease | None = None) -> list[int]:
        """Append, then notify for each event of a notifying kind."""
        seqs = await super().append(events, lease=lease)
        for event in events:
            if event.kind in self.notifying:
                self.notify(event.key)
        return seqs

    async def release_lease(self, lease: Lease) -> None:
        """Release, then notify."""
        await super().release_lease(lease)
        self.notify(lease.key)

    async def claim_due(
        self,
        now: datetime,
        holder: LeaseHolder,
        ttl: float,
        *,
        limit: int,
        interrupted: bool = False,
    ) -> list[Claim]:
        """Claim, then notify for each session claimed."""
        claims = await super().claim_due(now, holder, ttl, limit=limit, interrupted=interrupted)
        for claim in claims:
            self.notify(claim.lease.key)
        return claims


class CommitLog(WatchedLog):
    """A :class:`WatchedLog` that writes down each write transaction it commits, in order, in
    ``commits``: an append as the kinds of its events, a lease write as its name (a last
    append that drops the lease is one transaction: its kinds, then ``release_lease``).

    Lease renewals are counted in ``renewals`` instead: they come with time, not with what the
    run does, so two runs that did the same may renew a different number of times."""

    def __init__(self, *, clock: Clock = utcnow) -> None:
        super().__init__(clock=clock)
        self.commits: list[tuple[str, ...]] = []
        self.renewals = 0
        self._inner = 0  # > 0 inside a write that is part of an outer transaction

    def _commit(self, *what: str) -> None:
        if not self._inner:
            self.commits.append(what)

    async def append(self, events: Sequence[Event], *, lease: Lease | None = None) -> list[int]:
        """Write down the batch's kinds, then append."""
        self._commit(*(str(event.kind) for event in events))
        return await super().append(events, lease=lease)

    async def append_and_release(self, events: Sequence[Event], lease: Lease) -> list[int]:
        """Write down the batch's kinds and the release as one transaction, then do both."""
        self._commit(*(str(event.kind) for event in events), "release_lease")
        self._inner += 1
        try:
            return await super().append_and_release(events, lease)
        finally:
            self._inner -= 1

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Write down the lease taken, then take it."""
        self._commit("acquire_lease")
        return await super().acquire_lease(key, holder, ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Count the renewal, then renew."""
        self.renewals += 1
        return await super().renew_lease(lease, ttl)

    async def release_lease(self, lease: Lease) -> None:
        """Write down the release, then release."""
        self._commit("release_lease")
        await super().release_lease(lease)
