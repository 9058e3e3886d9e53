"""SqliteEventLog.prune: find the finished sessions, then delete their events in short batches."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from . import _schema as sql
from . import _worker as worker
from ._errors import LeaseLost, SessionLocked
from ._events import EventKind, SessionKey
from ._rules import as_utc, lease_expiry, may_take_lease, prunable
from ._store import Clock, Lease, LeaseHolder, PrunedSession, PruneResult

#: Events deleted per transaction. Each batch holds the write lock for about a millisecond, so
#: a live run's append waits at most that long behind a prune, however long the history.
BATCH = 500

#: Seconds the prune's lease on a session lasts; every batch renews it.
LEASE_TTL = 60.0

# The sessions whose latest checkpoint is older than the cut-off, oldest first: their summary
# (as summary_from_row reads it, holder columns empty), then the session id, how many of its
# events a prune deletes (neither the checkpoint nor a note), its newest event's seq, kind and
# time, and its lease row (all NULL when it was never leased).
_SELECT_CANDIDATES = f"""
SELECT s.app, s.user, s.session_id, s.turns, s.cost_usd, s.stop_reason, s.next_wake_at,
       s.updated_at, s.checkpoint_seq, s.paused, s.stopped, s.unpriced, s.input_tokens,
       s.cached_input_tokens, NULL, NULL, NULL,
       s.sid,
       (SELECT count(*) FROM events AS e
        WHERE e.sid = s.sid AND e.seq != s.checkpoint_seq AND e.kind != '{EventKind.NOTE}'),
       last.seq, last.kind, last.at,
       l.host, l.pid, l.token, l.started, l.expires_at, l.epoch
FROM sessions AS s
JOIN events AS last ON last.seq = (SELECT max(e.seq) FROM events AS e WHERE e.sid = s.sid)
LEFT JOIN leases AS l ON l.app = s.app AND l.user = s.user AND l.session_id = s.session_id
WHERE s.checkpoint_seq IS NOT NULL AND s.updated_at < ?
ORDER BY s.checkpoint_seq
"""

#: Where a candidate's summary columns end (its holder's three, empty, included).
_WIDTH = sql.SUMMARY_WIDTH + 3

_CHECKPOINT_SEQ = "SELECT checkpoint_seq FROM sessions WHERE sid = ?"

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
class _Plan:
    """A session to prune: its summary as a result entry, and where its events end."""

    entry: PrunedSession
    sid: int
    checkpoint_seq: int
    last_seq: int


class Pruner:
    """One prune of a SqliteEventLog, run through the log's own reads, writes and leases."""

    def __init__(
        self,
        fetch: Callable[[str, str, Sequence[Any]], Awaitable[list[Any]]],
        write: Callable[[str, Callable[[sqlite3.Connection], int]], Awaitable[int]],
        acquire: Callable[[SessionKey, LeaseHolder, float], Awaitable[Lease]],
        release: Callable[[Lease], Awaitable[None]],
        *,
        clock: Clock,
        host: str,
    ) -> None:
        self._fetch, self._write = fetch, write
        self._acquire, self._release = acquire, release
        self._clock, self._host = clock, host
        self._holder = LeaseHolder.this_process()

    async def run(self, before: datetime, *, dry_run: bool, batch: int) -> PruneResult:
        """Find the sessions, then (unless ``dry_run``) prune them one at a time."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch!r}")
        cut = as_utc(before)
        rows = await self._fetch(
            "find sessions to prune", _SELECT_CANDIDATES, (sql.timestamp(cut),)
        )
        (max_seq,) = (await self._fetch("find sessions to prune", sql.MAX_SEQ, ()))[0]
        plans, held = self._plan(rows, cut, max_seq)
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
        self, rows: list[Any], cut: datetime, max_seq: int
    ) -> tuple[list[_Plan], list[SessionKey]]:
        """The candidates that are finished, quiet since the cut-off and not yet pruned; and
        those of them a live process holds."""
        now = as_utc(self._clock())
        plans: list[_Plan] = []
        held: list[SessionKey] = []
        for row in rows:
            summary = sql.summary_from_row(row[:_WIDTH])
            sid, removable, last_seq, last_kind, last_at, *lease = row[_WIDTH:]
            if last_seq == max_seq and last_seq != summary.checkpoint_seq:
                removable -= last_kind != EventKind.NOTE  # the log's newest row stays
            if removable <= 0 or not prunable(summary, _moment(last_at), cut):
                continue
            holder, expiry, _ = sql.lease_of_row(lease if lease[2] else None)
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
                stamps = self._lease_stamps()
                work = functools.partial(
                    _delete_batch, plan=plan, lease=lease, stamps=stamps, limit=batch
                )
                count = await self._write(f"prune session {key}", worker.in_transaction(work))
                removed += max(count, 0)
                if count < batch:
                    return removed
        except LeaseLost:  # taken over (our lease ran out): what went is gone, the rest stays
            return removed
        finally:
            await self._release(lease)

    def _lease_stamps(self) -> tuple[str, str]:
        """The heartbeat and expiry a batch renews the prune's lease to."""
        now = as_utc(self._clock())
        return sql.timestamp(now), sql.timestamp(lease_expiry(now, LEASE_TTL))


def _delete_batch(
    conn: sqlite3.Connection, *, plan: _Plan, lease: Lease, stamps: tuple[str, str], limit: int
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


def _moment(text: str) -> datetime:
    """An event row's time (naive text is UTC)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
