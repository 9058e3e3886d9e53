"""A durable in-memory log that stops answering when told: the store of a network partition
that resets nothing, for the tests of a bounded stop."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

import anyio

from eventlog import (
    Claim,
    Clock,
    Event,
    EventKind,
    Lease,
    LeaseHolder,
    SessionKey,
    SessionSummary,
    utcnow,
)

from .watched_logs import LeaseCountingLog


class StuckLog(LeaseCountingLog):
    """A durable in-memory log whose every call, once :meth:`stick` was called, hangs until
    its caller is cancelled or :meth:`unstick` is called (then it goes on to the log).

    ``stalled`` is set when the first call hangs, ``hanging`` counts the calls hanging now and
    ``stalls`` every call that hung. A call that hangs honours a cancellation, as a socket read
    does; the run's bounds, not the store, must end the wait.
    """

    def __init__(self, *, clock: Clock = utcnow) -> None:
        super().__init__(clock=clock)
        self.stuck = False
        self.stalled = anyio.Event()
        self.hanging = 0
        self.stalls = 0
        self._freed = anyio.Event()

    def stick(self) -> None:
        """From now on every call hangs."""
        self.stuck = True
        self._freed = anyio.Event()

    def unstick(self) -> None:
        """Answer again: the calls hanging now go on, the later ones do not hang."""
        self.stuck = False
        self._freed.set()

    async def _stall(self) -> None:
        if not self.stuck:
            return
        self.hanging += 1
        self.stalls += 1
        self.stalled.set()
        try:
            await self._freed.wait()
        finally:
            self.hanging -= 1

    async def append(self, events: Sequence[Event], *, lease: Lease | None = None) -> list[int]:
        """Hang when stuck, else append."""
        await self._stall()
        return await super().append(events, lease=lease)

    async def append_and_release(self, events: Sequence[Event], lease: Lease) -> list[int]:
        """Hang when stuck, else append and release."""
        await self._stall()
        return await super().append_and_release(events, lease)

    async def read(
        self,
        key: SessionKey,
        *,
        after_seq: int = 0,
        kinds: Collection[EventKind] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Hang when stuck, else read."""
        await self._stall()
        return await super().read(key, after_seq=after_seq, kinds=kinds, limit=limit)

    async def read_last(
        self, key: SessionKey, kinds: Collection[EventKind], limit: int
    ) -> list[Event]:
        """Hang when stuck, else read the last ones."""
        await self._stall()
        return await super().read_last(key, kinds, limit)

    async def latest_checkpoint(self, key: SessionKey) -> Event | None:
        """Hang when stuck, else the latest checkpoint."""
        await self._stall()
        return await super().latest_checkpoint(key)

    async def due_sessions(self, now: datetime) -> list[SessionSummary]:
        """Hang when stuck, else the due sessions."""
        await self._stall()
        return await super().due_sessions(now)

    async def claim_due(
        self,
        now: datetime,
        holder: LeaseHolder,
        ttl: float,
        *,
        limit: int,
        interrupted: bool = False,
    ) -> list[Claim]:
        """Hang when stuck, else claim."""
        await self._stall()
        return await super().claim_due(now, holder, ttl, limit=limit, interrupted=interrupted)

    async def acquire_lease(self, key: SessionKey, holder: LeaseHolder, ttl: float) -> Lease:
        """Hang when stuck, else acquire."""
        await self._stall()
        return await super().acquire_lease(key, holder, ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Hang when stuck, else renew."""
        await self._stall()
        return await super().renew_lease(lease, ttl)

    async def renew_leases(self, leases: Sequence[Lease], ttl: float) -> list[Lease]:
        """Hang when stuck, else renew them."""
        await self._stall()
        return await super().renew_leases(leases, ttl)

    async def release_lease(self, lease: Lease) -> None:
        """Hang when stuck, else release."""
        await self._stall()
        await super().release_lease(lease)
