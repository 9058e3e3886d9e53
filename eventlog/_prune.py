"""The prune both durable logs run: the finished (or, on request, interrupted) sessions found,
then emptied batch by batch."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Protocol

import attrs

from ._errors import LeaseLost, SessionLocked
from ._events import SessionKey
from ._rules import as_utc, may_take_lease, prunable
from ._store import Lease, LeaseHolder, Now, PrunedSession, PruneResult, SessionSummary

#: Events deleted per batch. Each holds the session (its row lock, or SQLite's write lock)
#: for about a millisecond, so that a live run's append waits little behind a prune, however
#: long the history.
BATCH = 500

#: Seconds the prune's lease on a session lasts; every batch renews it.
LEASE_TTL = 60.0


@attrs.frozen
class Candidate:
    """A session a prune may take, as a log's query found it: its latest checkpoint older than
    the cut-off, or (stopped, or on request) no checkpoint at all."""

    summary: SessionSummary
    #: The session's id in the log's tables.
    sid: int
    #: How many of its events a prune deletes (neither the latest checkpoint nor a note).
    removable: int
    #: Its newest event's seq and time.
    last_seq: int
    last_at: datetime
    #: Its lease's holder (None: released or never leased) and expiry.
    holder: LeaseHolder | None
    expires_at: datetime | None


@attrs.frozen
class Plan:
    """A session to prune: its summary as a result entry, and where its events end."""

    entry: PrunedSession
    sid: int
    checkpoint_seq: int
    last_seq: int


class Statements(Protocol):
    """What a log runs for its prune."""

    async def candidates(self, cut: datetime, *, interrupted: bool) -> list[Candidate]:
        """The sessions whose latest checkpoint is older than ``cut``, and those without a
        checkpoint that are stopped (every one with ``interrupted``); oldest first, by their
        latest checkpoint's seq, else their newest event's. Each summary is as
        :meth:`EventLog.sessions` lists it (no holder, no checkpoint payload)."""
        ...

    async def delete_batch(self, plan: Plan, lease: Lease, limit: int) -> int:
        """Renew ``lease`` (:class:`LeaseLost` when it is not ours), then delete at most
        ``limit`` events of ``plan``; how many went (-1: the session has a newer checkpoint
        than the prune looked at, or a first one, and is left alone)."""
        ...


@attrs.define
class Pruner:
    """One prune of a log, run through the log's own statements and leases."""

    statements: Statements
    acquire: Callable[[SessionKey, LeaseHolder, float], Awaitable[Lease]]
    release: Callable[[Lease], Awaitable[None]]
    clock: Now
    host: str
    holder: LeaseHolder = attrs.field(factory=LeaseHolder.this_process)

    async def run(
        self, before: datetime, *, dry_run: bool, batch: int, interrupted: bool = False
    ) -> PruneResult:
        """Find the sessions, then (unless ``dry_run``) prune them one at a time."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch!r}")
        cut = as_utc(before)
        found = await self.statements.candidates(cut, interrupted=interrupted)
        plans, held = self._plan(found, cut, interrupted)
        if dry_run:
            return PruneResult(cut, tuple(p.entry for p in plans), tuple(held), dry_run=True)
        pruned: list[PrunedSession] = []
        for plan in plans:
            removed = await self._prune_one(plan, batch)
            if removed is None:
                held.append(plan.entry.key)
            elif removed:
                pruned.append(attrs.evolve(plan.entry, events=removed))
        return PruneResult(cut, tuple(pruned), tuple(held))

    def _plan(
        self, candidates: list[Candidate], cut: datetime, interrupted: bool
    ) -> tuple[list[Plan], list[SessionKey]]:
        """The candidates that are finished (or, with ``interrupted``, cut off), quiet since
        the cut-off and not yet pruned; and those of them a live process holds."""
        now = as_utc(self.clock())
        plans: list[Plan] = []
        held: list[SessionKey] = []
        for c in candidates:
            summary = c.summary
            if c.removable <= 0 or not prunable(summary, c.last_at, cut, interrupted=interrupted):
                continue
            if c.holder is not None and not may_take_lease(
                c.holder, c.expires_at, self.holder, now, this_host=self.host
            ):
                held.append(summary.key)
                continue
            entry = PrunedSession(summary.key, c.removable, summary.stop_reason, summary.updated_at)
            plans.append(Plan(entry, c.sid, summary.checkpoint_seq, c.last_seq))
        return plans, held

    async def _prune_one(self, plan: Plan, batch: int) -> int | None:
        """Delete a session's events batch by batch under its lease; how many went (``None``:
        a live process took the session first)."""
        try:
            lease = await self.acquire(plan.entry.key, self.holder, LEASE_TTL)
        except SessionLocked:
            return None
        removed = 0
        try:
            while True:
                count = await self.statements.delete_batch(plan, lease, batch)
                removed += max(count, 0)
                if count < batch:
                    return removed
        except LeaseLost:  # taken over (our lease ran out): what went is gone, the rest stays
            return removed
        finally:
            await self.release(lease)
