"""PostgresEventLog.prune's statements: its candidates read, one batch deleted per statement."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import attrs

from . import _postgres_sql as sql
from ._errors import LeaseLost
from ._prune import LEASE_TTL, Candidate, Plan
from ._rules import as_utc, lease_expiry
from ._store import Clock, Lease

#: Where a candidate's summary columns end (its holder's three, empty, included).
_WIDTH = sql.SUMMARY_WIDTH + 3

#: Runs one statement: (what it does, the statement, its parameters) -> its rows.
Fetch = Callable[[str, str, dict[str, Any]], Awaitable[list[tuple[Any, ...]]]]


@attrs.frozen
class PostgresPruning:
    """The candidates and batches of a prune of a PostgresEventLog, through its statements."""

    fetch: Fetch
    clock: Clock

    async def candidates(self, cut: datetime, *, interrupted: bool) -> list[Candidate]:
        """The sessions a prune may take (see :class:`eventlog._prune.Statements`)."""
        params = {"cut": cut, "interrupted": interrupted}
        rows = await self.fetch("find sessions to prune", sql.SELECT_PRUNABLE, params)
        found = []
        for row in rows:
            sid, removable, last_seq, last_at, *lease = row[_WIDTH:]
            holder, expiry, _ = sql.lease_of_row(lease)
            summary = sql.summary_from_row(row[:_WIDTH])
            found.append(
                Candidate(summary, sid, removable, last_seq, as_utc(last_at), holder, expiry)
            )
        return found

    async def delete_batch(self, plan: Plan, lease: Lease, limit: int) -> int:
        """One batch in one statement (see :class:`eventlog._prune.Statements`)."""
        now = as_utc(self.clock())
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
        rows = await self.fetch(f"prune session {plan.entry.key}", sql.PRUNE_BATCH, params)
        renewed, checkpoint_seq, deleted = rows[0]
        if not renewed:
            raise LeaseLost(str(lease.key), "taken over during the prune")
        return -1 if checkpoint_seq != plan.checkpoint_seq else int(deleted)
