"""PostgresEventLog.prune: find the finished sessions, then delete their events in short batches."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import attrs

from . import _postgres_sql as sql
from ._errors import LeaseLost, SessionLocked
from ._events import SessionKey
from ._rules import as_utc, lease_expiry, may_take_lease, prunable
from ._store import Clock, Lease, LeaseHolder, PrunedSession, PruneResult

#: Events deleted per statement: each holds the session's row lock briefly, so that a live
#: append to the session waits little behind a prune, however long the history.
BATCH = 500

#: Seconds the prune's lease on a session lasts; every batch renews it.
LEASE_TTL = 60.0

#: Where a candidate's summary columns end (its holder's three, empty, included).
_WIDTH = sql.SUMMARY_WIDTH + 3

#: Runs one statement: (what it does, the statement, its parameters) -> its rows.
Fetch = Callable[[str, str, dict[str, Any]], Awaitable[list[tuple[Any, ...]]]]


@attrs.frozen
class _Plan:
    """A session to prune: its summary as a result entry, and where its events end."""

    entry: PrunedSession
    sid: int
    checkpoint_seq: int
    last_seq: int


class Pruner:
    """One prune of a PostgresEventLog, run through the log's own statements and leases."""

    def __init__(
        self,
        fetch: Fetch,
        acquire: Callable[[SessionKey, LeaseHolder, float], Awaitable[Lease]],
        release: Callable[[Lease], Awaitable[None]],
        *,
        clock: Clock,
        host: str,
    ) -> None:
        self._fetch = fetch
        self._acquire, self._release = acquire, release
        self._clock, self._host = clock, host
        self._holder = LeaseHolder.this_process()

    async def run(self, before: datetime, *, dry_run: bool, batch: int) -> PruneResult:
        """Find the sessions, then (unless ``dry_run``) prune them one at a time."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch!r}")
        cut = as_utc(before)
        rows = await self._fetch("find sessions to prune", sql.SELECT_PRUNABLE, {"cut": cut})
        plans, held = self._plan(rows, cut)
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
        self, rows: list[tuple[Any, ...]], cut: datetime
    ) -> tuple[list[_Plan], list[SessionKey]]:
        """The candidates that are finished, quiet since the cut-off and not yet pruned; and
        those of them a live process holds."""
        now = as_utc(self._clock())
        plans: list[_Plan] = []
        held: list[SessionKey] = []
        for row in rows:
            summary = sql.summary_from_row(row[:_WIDTH])
            sid, removable, last_seq, last_at, *lease = row[_WIDTH:]
            if removable <= 0 or not prunable(summary, as_utc(last_at), cut):
                continue
            holder, expiry, _ = sql.lease_of_row(lease)
            if holder is not None and not may_take_lease(
                holder, expiry, self._holder, now, this_host=self._host
            ):
                held.append(summary.key)
                continue
            entry = PrunedSession(summary.key, removable, summary.stop_reason, summary.updated_at)
            plans.append(_Plan(entry, sid, summary.checkpoint_seq, last_seq))
        return plans, held

    async def _prune_one(self, plan: _Plan, batch: int) -> int | None:
        """Delete a session's events batch by batch under its lease; how many went (``None``:
        a live process took the session first)."""
        key = plan.entry.key
        try:
            lease = await self._acquire(key, self._holder, LEASE_TTL)
        except SessionLocked:
            return None
        removed = 0
        try:
            while True:
                count = await self._batch(plan, lease, batch)
                removed += max(count, 0)
                if count < batch:
                    return removed
        except LeaseLost:  # taken over (our lease ran out): what went is gone, the rest stays
            return removed
        finally:
            await self._release(lease)

    async def _batch(self, plan: _Plan, lease: Lease, limit: int) -> int:
        """One batch: how many events went (-1: the session has a newer checkpoint than the
        prune looked at, and is left alone); :class:`LeaseLost` when the lease is not ours."""
        now = as_utc(self._clock())
        params = {
            "now": now,
            "expires_at": lease_expiry(now, LEASE_TTL),
            "sid": plan.sid,
            "token": lease.holder.token,
            "epoch": lease.epoch,
            "last_seq": plan.last_seq,
            "checkpoint_seq": plan.checkpoint_seq,
            "limit": limit,
        }
        rows = await self._fetch(f"prune session {plan.entry.key}", sql.PRUNE_BATCH, params)
        renewed, checkpoint_seq, deleted = rows[0]
        if not renewed:
            raise LeaseLost(str(lease.key), "taken over during the prune")
        return -1 if checkpoint_seq != plan.checkpoint_seq else int(deleted)
