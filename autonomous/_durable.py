"""A run on a durable session: the lease and its heartbeat, the log watcher, resume and wake."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from anyio.abc import TaskGroup

from eventlog import (
    CorruptEvent,
    Event,
    EventKind,
    EventLog,
    EventLogError,
    Lease,
    LeaseHolder,
    LeaseLost,
    SessionKey,
    utcnow,
)
from scheduler import ScheduleEvent, SleepScheduler

from ._controls import latest_control_seq
from ._options import RunOptions
from ._restore import Restored

if TYPE_CHECKING:
    from ._run import Run

_WATCH_KINDS = (EventKind.INBOX_QUEUED, EventKind.CONTROL)
_RELEASE_TIMEOUT = 5.0
_log = structlog.get_logger("autonomous")


class SessionKeeper:
    """Holds a durable session's lease for one run, and watches the log for remote control.

    The lease is renewed every third of ``lease_ttl``; losing it (another process took the
    session over after our lease expired) stops the run, which then writes nothing more.
    The renewing and polling tasks start when the first of them is due (:meth:`start_later`):
    a run that ends sooner, as most short runs do, never pays for two tasks and their
    cancellation.
    """

    def __init__(self, run: Run, log: EventLog, key: SessionKey, opts: RunOptions) -> None:
        self.run = run
        self.log = log
        self.key = key
        self.opts = opts
        self.lease: Lease | None = None
        self.lost = False
        self.releasing = False
        self.seen = 0
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: TaskGroup | None = None

    async def acquire(self) -> None:
        """Take the lease (raises :class:`eventlog.SessionLocked` when a live holder has it)."""
        holder = LeaseHolder.this_process()
        try:
            self.lease = await self.log.acquire_lease(self.key, holder, self.opts.lease_ttl)
        except anyio.get_cancelled_exc_class():
            # Cancelled mid-call: our row may have landed. Release by our token, or it would
            # look held until it expires.
            await self._release(Lease(self.key, holder, utcnow()))
            raise

    async def start_watching_after(self, seq: int | None = None) -> None:
        """Watch for inbox and control events newer than ``seq`` (default: the newest now).

        The default is the log's newest seq when our lease was taken, when the store told it
        (no read then); else the session's newest inbox or control event, read now.
        """
        if seq is None and self.lease is not None:
            seq = self.lease.log_seq
        self.seen = seq if seq is not None else await latest_control_seq(self.log, self.key)

    def start_later(self, tg: TaskGroup) -> None:
        """Start :meth:`heartbeat` and :meth:`watch` in ``tg`` once the first of them is due.

        Must be undone by :meth:`stop` before ``tg`` exits.
        """
        loop = asyncio.get_running_loop()
        first = min(self.opts.lease_ttl / 3, self.opts.control_poll)
        self._timer = loop.call_at(loop.time() + first, self._start, tg, loop.time())

    def _start(self, tg: TaskGroup, armed_at: float) -> None:
        self._timer = None
        self._tasks = tg
        elapsed = asyncio.get_running_loop().time() - armed_at
        tg.start_soon(self.heartbeat, max(0.0, self.opts.lease_ttl / 3 - elapsed), name="lease")
        tg.start_soon(self.watch, max(0.0, self.opts.control_poll - elapsed), name="watch")

    def stop(self) -> None:
        """Stop the tasks :meth:`start_later` started, or its timer if they have not."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._tasks is not None:
            self._tasks.cancel_scope.cancel()
            self._tasks = None

    async def heartbeat(self, first: float) -> None:
        """Renew the lease (first after ``first`` seconds) until cancelled; a lost lease
        stops the run."""
        every = self.opts.lease_ttl / 3
        delay = first
        while True:
            await anyio.sleep(delay)
            delay = every
            lease = self.lease
            if lease is None:  # dropped with the run's last write
                return
            try:
                renewed = await self.log.renew_lease(lease, self.opts.lease_ttl)
            except LeaseLost:
                if self.releasing:  # our own release went first
                    return
                self.lost = True
                self.run.lease_lost()
                return
            except EventLogError as exc:  # e.g. busy: try again; expiry decides, not one miss
                _log.warning("lease_renewal_failed", error=type(exc).__name__)
            else:
                if self.lease is not None:
                    self.lease = renewed

    async def watch(self, first: float) -> None:
        """Poll the log (first after ``first`` seconds) for inbox messages and control
        requests from other processes."""
        delay = first
        while True:
            await anyio.sleep(delay)
            delay = self.opts.control_poll
            try:
                await self.poll()
            except EventLogError as exc:  # a read can fail for a moment; the next poll retries
                _log.warning("control_poll_failed", error=type(exc).__name__)

    async def poll(self) -> None:
        """Read the inbox and control events appended since the last read, and obey them.

        A row that cannot be read is reported once and passed over: it must not blind the
        watch to every stop and inject after it.
        """
        try:
            events = await self.log.read(self.key, after_seq=self.seen, kinds=_WATCH_KINDS)
        except CorruptEvent:
            events = await self._read_past_bad_row()
        for event in events:
            self.seen = max(self.seen, event.seq)
            self.run.apply_remote(event)

    async def _read_past_bad_row(self) -> list[Event]:
        """The readable events before the first bad row, one read each; the bad row is
        logged and marked seen (the events after it come with the next poll)."""
        events: list[Event] = []
        after = self.seen
        while True:
            try:
                batch = await self.log.read(self.key, after_seq=after, kinds=_WATCH_KINDS, limit=1)
            except CorruptEvent as exc:
                _log.error(
                    "control_event_unreadable",
                    session=exc.session,
                    seq=exc.seq,
                    event_id=exc.event_id,
                    error=str(exc),
                )
                self.seen = max(self.seen, exc.seq)
                return events
            if not batch:
                return events
            events.append(batch[0])
            after = batch[0].seq

    async def append_last(self, events: list[Event]) -> list[int]:
        """Append the run's last events, and drop the lease with them when the store can.

        The store's ``append_and_release`` does both in one transaction. When this returns,
        the lease is no longer held; when it raises, the lease is still ours for
        :meth:`release` to drop.
        """
        both = getattr(self.log, "append_and_release", None)
        lease = self.lease
        if self.lost:
            raise LeaseLost(str(self.key), "taken over by another holder")
        if both is None or lease is None:
            return await self.log.append(events, lease=lease)
        self.releasing = True
        seqs: list[int] = await both(events, lease)
        self.lease = None
        return seqs

    async def release(self) -> None:
        """Drop our lease row (shielded, bounded); never another holder's."""
        if self.lease is None or self.lost:
            return
        lease, self.lease = self.lease, None
        await self._release(lease)

    async def _release(self, lease: Lease) -> None:
        with anyio.move_on_after(_RELEASE_TIMEOUT, shield=True):
            try:
                await self.log.release_lease(lease)
            except EventLogError as exc:  # it expires by itself; never hide the run's own error
                _log.warning("lease_release_failed", error=type(exc).__name__)


async def wait_for_wake(run: Run, wake_at: datetime) -> None:
    """Sleep until ``wake_at`` on the run's clock; an inject or a wake request ends it early.

    The same wait as :class:`scheduler.SleepScheduler`'s, so a resumed deferred session and a
    sleeping one wake by the same rules.
    """
    await SleepScheduler(clock=run.opts.clock).wait(ScheduleEvent(wake_at), run.wake_signal)


def apply_restored(run: Run, restored: Restored) -> None:
    """Put a resumed run where its checkpoint (and any crashed turn after it) left it."""
    cp = restored.checkpoint
    run.tally.totals = restored.totals
    run.goal = restored.goal or run.goal
    run.next_prompt = cp.next_prompt if cp is not None else run.opts.continuation_prompt
    run.next_wake_at = cp.next_wake_at if cp is not None else None
    if cp is not None:
        run.tally.final_text = cp.final_text
        run.done_detail, run.outcome, run.outcome_result = cp.done_detail, cp.outcome, cp.result
        run.failed_attempts = cp.failed_attempts
    for message_id in restored.delivered:
        run.inbox.forget(message_id)
    for message in restored.pending:
        run.inbox.add(message)
    if restored.paused:
        run.paused = True
    if restored.woken:  # a wake request sent while the session slept ends the wait
        run.next_wake_at = None
    run.resumed_turn = restored.unfinished
    assert run.conv is not None
    run.conv.goal = run.goal
    unfinished = restored.unfinished
    run.conv.load(restored.history, unfinished=unfinished.length if unfinished else 0)


def describe(restored: Restored) -> dict[str, Any]:
    """Log fields for a resume (numbers only)."""
    return {
        "checkpoint_seq": restored.checkpoint_seq,
        "turns": restored.totals.turns,
        "history_messages": len(restored.history),
        "pending_inbox": len(restored.pending),
        "unfinished_turn": restored.unfinished is not None,
        "open_calls": len(restored.unfinished.calls) if restored.unfinished else 0,
    }
