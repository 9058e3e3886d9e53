"""SqliteEventLog.prune's statements: its candidates read, one batch deleted per transaction."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import attrs

from .._errors import LeaseLost
from .._events import EventKind
from .._prune import LEASE_TTL, Candidate, Plan
from .._rules import as_utc, lease_expiry
from .._store import Lease, Now
from . import _schema as sql
from . import _worker as worker

# The sessions a prune may take, oldest first: those whose latest checkpoint is older than the
# cut-off, and those without a checkpoint that are stopped (every one of them with the second
# parameter, interrupted). Their summary (as sessions() lists it, holder columns empty), then
# the session id, how many of its events a prune deletes (neither the checkpoint nor a note),
# its newest event's seq, kind and time, and its lease row (all NULL when it was never leased).
_SELECT_CANDIDATES = f"""
SELECT {sql.LISTED_SUMMARY}, NULL, NULL, NULL,
       s.sid,
       (SELECT count(*) FROM events AS e
        WHERE e.sid = s.sid AND e.seq != coalesce(s.checkpoint_seq, 0)
            AND e.kind != '{EventKind.NOTE}'),
       last.seq, last.kind, last.at,
       l.host, l.pid, l.token, l.started, l.expires_at, l.epoch
FROM sessions AS s
JOIN events AS last ON last.seq = (SELECT max(e.seq) FROM events AS e WHERE e.sid = s.sid)
LEFT JOIN leases AS l ON l.app = s.app AND l.user = s.user AND l.session_id = s.session_id
WHERE (s.checkpoint_seq IS NOT NULL AND s.updated_at < ?1)
    OR (s.checkpoint_seq IS NULL AND (?2 OR s.stopped))
ORDER BY coalesce(s.checkpoint_seq, last.seq)
"""

#: Where a candidate's summary columns end (its holder's three, empty, included).
_WIDTH = sql.SUMMARY_WIDTH + 3

#: The session's latest checkpoint's seq (0: none yet).
_CHECKPOINT_SEQ = "SELECT coalesce(checkpoint_seq, 0) FROM sessions WHERE sid = ?"

# One batch: the oldest events of the session up to its newest one when the prune looked
# (what is appended later stays), but its latest checkpoint and its notes, and never the
# newest row of the whole log: events.seq is the rowid, and SQLite would hand a deleted
# largest rowid out again.
_DELETE_BATCH = f"""
DELETE FROM events WHERE seq IN (
    SELECT seq FROM events
    WHERE sid = ? AND seq <= ? AND seq != ? AND kind != '{EventKind.NOTE}'
        AND seq < (SELECT max(seq) FROM events)
    ORDER BY seq LIMIT ?
)
"""


@attrs.frozen
class SqlitePruning:
    """The candidates and batches of a prune of a SqliteEventLog, through its reads and writes."""

    fetch: Callable[[str, str, Sequence[Any]], Awaitable[list[Any]]]
    write: Callable[[str, Callable[[sqlite3.Connection], int]], Awaitable[int]]
    clock: Now

    async def candidates(self, cut: datetime, *, interrupted: bool) -> list[Candidate]:
        """The sessions a prune may take (see :class:`eventlog._prune.Statements`); the log's
        newest event is not counted as removable (SQLite would hand its seq out again)."""
        action = "find sessions to prune"
        params = (sql.timestamp(cut), int(interrupted))
        rows = await self.fetch(action, _SELECT_CANDIDATES, params)
        (max_seq,) = (await self.fetch(action, sql.MAX_SEQ, ()))[0]
        found = []
        for row in rows:
            summary = sql.summary_from_row(row[:_WIDTH])
            sid, removable, last_seq, last_kind, last_at, *lease = row[_WIDTH:]
            if last_seq == max_seq and last_seq != summary.checkpoint_seq:
                removable -= last_kind != EventKind.NOTE  # the log's newest row stays
            holder, expiry, _ = sql.lease_of_row(lease if lease[2] else None)
            found.append(
                Candidate(summary, sid, removable, last_seq, sql.moment(last_at), holder, expiry)
            )
        return found

    async def delete_batch(self, plan: Plan, lease: Lease, limit: int) -> int:
        """One batch in one transaction (see :class:`eventlog._prune.Statements`)."""
        now = as_utc(self.clock())
        stamps = sql.timestamp(now), sql.timestamp(lease_expiry(now, LEASE_TTL))
        work = functools.partial(_delete_batch, plan=plan, lease=lease, stamps=stamps, limit=limit)
        return await self.write(f"prune session {plan.entry.key}", worker.in_transaction(work))


def _delete_batch(
    conn: sqlite3.Connection, *, plan: Plan, lease: Lease, stamps: tuple[str, str], limit: int
) -> int:
    """One batch, inside the caller's transaction: renew our lease (:class:`LeaseLost` when it
    is not ours any more), then delete; how many events went (-1: the session has a newer
    checkpoint than the prune looked at, and is left alone)."""
    ours = (lease.holder.token, lease.epoch)
    cursor = conn.execute(sql.RENEW_LEASE, (*stamps, *sql.session_params(lease.key), *ours))
    if cursor.rowcount != 1:
        row = conn.execute(sql.SELECT_LEASE, sql.session_params(lease.key)).fetchone()
        raise LeaseLost(str(lease.key), sql.lost_detail(row))
    (checkpoint_seq,) = conn.execute(_CHECKPOINT_SEQ, (plan.sid,)).fetchone()
    if checkpoint_seq != plan.checkpoint_seq:
        return -1
    params = (plan.sid, plan.last_seq, plan.checkpoint_seq, limit)
    return conn.execute(_DELETE_BATCH, params).rowcount
