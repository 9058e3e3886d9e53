"""PostgresEventLog.prune's statements: its candidates read, one batch deleted per statement."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import attrs

from .._errors import LeaseLost
from .._events import EventKind
from .._prune import LEASE_TTL, Candidate, Plan
from .._rules import as_utc, lease_expiry
from .._store import Lease, Now
from . import _sql as sql

# The sessions a prune may take, oldest first: those whose latest checkpoint is older than the
# cut-off, and those without a checkpoint that are stopped (every one of them with
# %(interrupted)s). Their summary (as sessions() lists it, holder columns empty), then the
# session id, how many of its events a prune deletes (neither the checkpoint nor a note), its
# newest event's seq and time, and its lease columns (as lease_of_row reads them). A session
# row without an event (a lease alone) has no newest event and is left out.
SELECT_PRUNABLE = f"""
SELECT {sql.LISTED_SUMMARY}, NULL, NULL, NULL, s.sid,
       (SELECT count(*) FROM eventlog_events AS e
        WHERE e.sid = s.sid AND e.seq <> coalesce(s.checkpoint_seq, 0)
            AND e.kind <> '{EventKind.NOTE}'),
       last.seq, last.at,
       s.holder_host, s.holder_pid, s.holder_token, s.holder_started, s.expires_at, s.epoch
FROM eventlog_sessions AS s
CROSS JOIN LATERAL (
    SELECT e.seq, e.at FROM eventlog_events AS e WHERE e.sid = s.sid ORDER BY e.seq DESC LIMIT 1
) AS last
WHERE (s.checkpoint_seq IS NOT NULL AND s.updated_at < %(cut)s)
    OR (s.checkpoint_seq IS NULL AND (%(interrupted)s OR s.stopped))
ORDER BY coalesce(s.checkpoint_seq, last.seq)
"""

# One batch, one statement: renew the prune's lease (which locks the row, so that no append
# runs meanwhile), then delete the session's oldest events up to its newest one when the prune
# looked (what came later stays), but its latest checkpoint and its notes; nothing when the
# session has a newer checkpoint than the prune looked at (or a first one). Says: the lease
# renewed (0 or 1), the session's checkpoint seq (0: none), and how many events went.
PRUNE_BATCH = f"""
WITH fence AS (
    UPDATE eventlog_sessions SET heartbeat = %(now)s, expires_at = %(expires_at)s
    WHERE sid = %(sid)s AND holder_token = %(token)s AND epoch = %(epoch)s
    RETURNING coalesce(checkpoint_seq, 0) AS checkpoint_seq  -- 0: none yet
), doomed AS (
    SELECT e.seq FROM eventlog_events AS e
    WHERE e.sid = %(sid)s AND e.seq <= %(last_seq)s AND e.seq <> %(checkpoint_seq)s
        AND e.kind <> '{EventKind.NOTE}'
        AND (SELECT checkpoint_seq FROM fence) = %(checkpoint_seq)s
    ORDER BY e.seq
    LIMIT %(limit)s
), deleted AS (
    DELETE FROM eventlog_events AS e USING doomed AS d
    WHERE e.sid = %(sid)s AND e.seq = d.seq
    RETURNING 1
)
SELECT (SELECT count(*) FROM fence), (SELECT checkpoint_seq FROM fence),
       (SELECT count(*) FROM deleted)
"""

#: Where a candidate's summary columns end (its holder's three, empty, included).
_WIDTH = sql.SUMMARY_WIDTH + 3

#: Runs one statement: (what it does, the statement, its parameters) -> its rows.
Fetch = Callable[[str, str, dict[str, Any]], Awaitable[list[tuple[Any, ...]]]]


@attrs.frozen
class PostgresPruning:
    """The candidates and batches of a prune of a PostgresEventLog, through its statements."""

    fetch: Fetch
    clock: Now

    async def candidates(self, cut: datetime, *, interrupted: bool) -> list[Candidate]:
        """The sessions a prune may take (see :class:`eventlog._prune.Statements`)."""
        params = {"cut": cut, "interrupted": interrupted}
        rows = await self.fetch("find sessions to prune", SELECT_PRUNABLE, params)
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
        rows = await self.fetch(f"prune session {plan.entry.key}", PRUNE_BATCH, params)
        renewed, checkpoint_seq, deleted = rows[0]
        if not renewed:
            raise LeaseLost(str(lease.key), "taken over during the prune")
        return -1 if checkpoint_seq != plan.checkpoint_seq else int(deleted)
