"""A run on a durable session: the lease and its heartbeat, and the log watcher."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import anyio
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
from scheduler import Clock

from ._control_requests import latest_control_seq
from ._logging import get_logger
from ._options import RunOptions

_WATCH_KINDS = (EventKind.INBOX_QUEUED, EventKind.CONTROL)
_RELEASE_TIMEOUT = 5.0
_log = get_logger("autonomous")


class SessionKeeper:
    """Holds a durable session's lease for one run, and watches the log for remote control.

    The lease is renewed every third of ``lease_ttl``; losing it (another process took the
    session over after our lease expired) stops the run, which then writes nothing more.
    Renewing and polling are two tasks of the run's task group (:meth:`start`), sleeping on
    the run's clock, so a test's :class:`scheduler.FakeClock` drives them too.

    ``on_lost`` is called when a renewal finds the lease taken over; ``on_event`` with each
    inbox or control event another process appended.
    """

    def __init__(
        self,
        log: EventLog,
        key: SessionKey,
        opts: RunOptions,
        *,
        on_lost: Callable[[], None],
        on_event: Callable[[Event], None],
    ) -> None:
        self.log = log
        self.key = key
        self.opts = opts
        self.lease: Lease | None = None
        self.lost = False
        self.releasing = False
        self.seen = 0
        self._on_lost = on_lost
        self._on_event = on_event
        # When the lease was taken and the watch began: the first renewal and poll are due
        # a period after these, however long the run took to start between them.
        self._taken_at = self._watch_from = opts.clock.now()

    async def acquire(self) -> None:
        """Take the lease (raises :class:`eventlog.SessionLocked` when a live holder has it)."""
        holder = LeaseHolder.this_process()
        self._taken_at = self.opts.clock.now()
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
        self._watch_from = self.opts.clock.now()
        if seq is None and self.lease is not None:
            seq = self.lease.log_seq
        self.seen = seq if seq is not None else await latest_control_seq(self.log, self.key)

    def start(self, tg: TaskGroup) -> None:
        """Start :meth:`heartbeat` and :meth:`watch` as tasks of ``tg``, the run's task group.

        Both sleep first, on the run's clock; cancelling ``tg`` stops them.
        """
        tg.start_soon(self.heartbeat, name="lease")
        tg.start_soon(self.watch, name="watch")

    async def heartbeat(self) -> None:
        """Renew the lease every third of ``lease_ttl`` until cancelled; a lost lease stops
        the run."""
        every = self.opts.lease_ttl / 3
        tick = _Ticker(self.opts.clock, every, self._taken_at)
        while True:
            await tick.wait()
            lease = self.lease
            if lease is None:  # dropped with the run's last write
                return
            try:
                renewed = await self.log.renew_lease(lease, self.opts.lease_ttl)
            except LeaseLost:
                if self.releasing:  # our own release went first
                    return
                self.lost = True
                self._on_lost()
                return
            except EventLogError as exc:  # e.g. busy: try again; expiry decides, not one miss
                _log.warning("lease_renewal_failed", error=type(exc).__name__)
            else:
                if self.lease is not None:
                    self.lease = renewed

    async def watch(self) -> None:
        """Poll the log every ``control_poll`` for inbox messages and control requests from
        other processes, until cancelled."""
        tick = _Ticker(self.opts.clock, self.opts.control_poll, self._watch_from)
        while True:
            await tick.wait()
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
            self._on_event(event)

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


class _Ticker:
    """Wakes every ``every`` seconds on ``clock``: first one period after ``since``, then
    one period after the previous tick.

    The next tick is one period after the last one, but never in the past (a stalled loop
    ticks once at once, not once per period missed) and never more than a period away (a
    wall clock set back does not stall renewals).
    """

    def __init__(self, clock: Clock, every: float, since: datetime) -> None:
        self._clock = clock
        self._every = timedelta(seconds=every)
        self._due = since + self._every

    async def wait(self) -> None:
        """Sleep until the next tick is due."""
        await self._clock.sleep_until(self._due)
        now = self._clock.now()
        self._due = min(max(self._due + self._every, now), now + self._every)
