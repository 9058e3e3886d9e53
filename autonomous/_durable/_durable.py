"""A run on a durable session: the lease (its own, or one lent to it) and its heartbeat, and
the log watcher (the store's ``watch``, and the poll)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from typing import Any, cast

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
    StoreWatch,
    utcnow,
)
from scheduler import Clock

from .._control._control_requests import latest_control_seq
from .._logging import get_logger
from .._options import RunOptions
from .._result import StopReason

#: The events a run obeys: inbox messages and control requests (from any process).
WATCH_KINDS = (EventKind.INBOX_QUEUED, EventKind.CONTROL)
_RELEASE_TIMEOUT = 5.0
#: Seconds one renewal or read of the keeper may take (on the run's clock) unless told: a
#: call in flight when the run stops must end within the run's last writes' time.
CALL_TIMEOUT = 5.0
_log = get_logger("autonomous")


class AdoptedLease:
    """A session lease taken by someone else and lent to one run, e.g. by a daemon's claim.

    ``resume_autonomous(build, ref, lease=AdoptedLease(lease))`` runs the session on it: the
    run takes no lease of its own and fences every append with this one, but it does not renew
    it. The lender does (a worker renews all its leases in one batch): :meth:`renewed` records
    each renewal, :meth:`lose` tells the run the lease is gone (the run then stops as
    ``lease_lost`` and writes nothing more). The lender releases it too, unless it lets the
    run do so with its last write (``release_at_end``: the final checkpoint and the release
    are then one trip to the store); a run that ends ``context_cancelled`` (stopped, or
    cancelled by its caller) leaves the lease held even so, for the lender's own last writes
    (a daemon hands the session back). :attr:`released` says
    whether the run released it. Made inside the event loop.
    """

    def __init__(self, lease: Lease, *, release_at_end: bool = False) -> None:
        if not isinstance(lease, Lease):
            raise TypeError(f"AdoptedLease needs an eventlog.Lease, got {lease!r}")
        self._lease = lease
        self._lost = anyio.Event()
        self.release_at_end = release_at_end
        self._released = False

    @property
    def lease(self) -> Lease:
        """The lease as last renewed (the same holder and epoch as the one lent)."""
        return self._lease

    @property
    def lost(self) -> bool:
        """Whether the lender found the lease lost."""
        return self._lost.is_set()

    @property
    def released(self) -> bool:
        """Whether the run released the lease with its last write (``release_at_end``)."""
        return self._released

    def mark_released(self) -> None:
        """Record that the run's last write released the lease (the lender must not renew
        or release it again)."""
        self._released = True

    def renewed(self, lease: Lease) -> None:
        """Record a renewal of the lease (a later expiry; holder and epoch unchanged)."""
        if lease.key != self._lease.key or lease.epoch != self._lease.epoch:
            raise ValueError(f"{lease!r} is not a renewal of {self._lease!r}")
        self._lease = lease

    def lose(self) -> None:
        """The lease is no longer ours (a renewal left it out): the run stops at once."""
        self._lost.set()

    async def wait_lost(self) -> None:
        """Return when :meth:`lose` has been called."""
        await self._lost.wait()


#: The members the EventLog protocol gained after its first release, with behaviour of its own
#: (the token members': NotImplementedError, a run never calls them).
_LATER_MEMBERS = frozenset(
    {"append_and_release", "watch", "create_token", "tokens", "revoke_token", "token_by_digest"}
)


def full_log(log: EventLog) -> EventLog:
    """``log`` itself when it has every member of :class:`eventlog.EventLog` (every store of
    ours: they subclass it); a store written to the protocol before ``append_and_release``,
    ``watch`` and the token members joined it is given the protocol's own behaviour for what
    it lacks."""
    if isinstance(log, EventLog):
        return log
    return cast(EventLog, _OlderStore(log))


class _OlderStore:
    """A store that lacks a later member of the EventLog protocol: the protocol's own for that
    (the two calls for ``append_and_release``, a watch that never wakes), its own for the rest."""

    def __init__(self, log: object) -> None:
        self._log = log

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._log, name)
        except AttributeError:
            if name not in _LATER_MEMBERS:
                raise
        return functools.partial(getattr(EventLog, name), self)


class SessionKeeper:
    """Holds a durable session's lease for one run, and watches the log for remote control.

    The lease is renewed every third of ``lease_ttl``; losing it (another process took the
    session over after our lease expired) stops the run, which then writes nothing more.
    Renewing and polling are two tasks of the run's task group (:meth:`start`), sleeping on
    the run's clock, so a test's :class:`scheduler.FakeClock` drives them too.

    ``on_lost`` is called when a renewal finds the lease taken over; ``on_event`` with each
    inbox or control event another process appended. With ``adopted`` the run holds a lease
    lent to it (:class:`AdoptedLease`): no acquire, no renewal, no release here, and the
    lender's :meth:`AdoptedLease.lose` is what stops the run.

    The store's ``watch`` also wakes the watch on its notifications (PostgreSQL's do), so a
    remote inject or stop reaches the run at once; ``control_poll`` stays the fallback (and
    is all there is for a store that does not notify: its watch never wakes).
    The run subscribes (:meth:`begin`) before its first read of the log, so that the
    notifications cover whatever that read did not see.

    Each renewal and read of the two tasks is given up after ``call_timeout`` seconds on the
    run's clock (the next tick tries again; the lease's expiry decides, not one miss): a
    store that does not answer, or one that answers a cancelled caller before it lets go
    (PostgreSQL), never holds a stopping run longer than that.
    """

    def __init__(
        self,
        log: EventLog,
        key: SessionKey,
        opts: RunOptions,
        *,
        on_lost: Callable[[], None],
        on_event: Callable[[Event], None],
        adopted: AdoptedLease | None = None,
        call_timeout: float = CALL_TIMEOUT,
    ) -> None:
        self.log = full_log(log)
        self.key = key
        self.opts = opts
        self.adopted = adopted
        self.lease: Lease | None = adopted.lease if adopted is not None else None
        self.lost = False
        self.releasing = False
        self.seen = 0
        self.written_last = False  # the run's last write has begun: nothing more to obey
        self._on_lost = on_lost
        self._on_event = on_event
        self._call_timeout = call_timeout
        self._reading = anyio.Lock()  # one read at a time: two would obey an event twice
        self._notified: StoreWatch | None = None
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
            with anyio.move_on_after(_RELEASE_TIMEOUT, shield=True):
                await self._release(Lease(self.key, holder, utcnow()))
            raise

    async def begin(self, stack: AsyncExitStack) -> None:
        """Subscribe to the store's ``watch`` of the session (for as long as ``stack`` is
        open), then take the lease unless one was lent.

        Called before the run first reads the session (lease, checkpoint, restore): every
        change committed after that wakes the watch, so it needs no read of its own for the
        time between that read and its start.
        """
        self._notified = await stack.enter_async_context(self.log.watch(self.key))
        if self.adopted is None:
            await self.acquire()

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
        the run. A lent lease is the lender's to renew: this waits for it to be lost."""
        if self.adopted is not None:
            await self.adopted.wait_lost()
            if not self.releasing:
                self.lost = True
                self._on_lost()
            return
        every = self.opts.lease_ttl / 3
        tick = _Ticker(self.opts.clock, every, self._taken_at)
        while True:
            await tick.wait()
            lease = self.lease
            if lease is None:  # dropped with the run's last write
                return
            renewed: Lease | None = None
            try:
                with self.opts.clock.move_on_after(self._call_timeout):
                    renewed = await self.log.renew_lease(lease, self.opts.lease_ttl)
            except LeaseLost:
                if self.releasing:  # our own release went first
                    return
                self.lost = True
                self._on_lost()
                return
            except EventLogError as exc:  # e.g. busy: try again; expiry decides, not one miss
                _log.warning("lease_renewal_failed", error=type(exc).__name__)
                continue
            if renewed is None:  # no answer in time: the same, the next tick tries again
                _log.warning("lease_renewal_failed", error="TimeoutError")
            elif self.lease is not None:
                self.lease = renewed

    async def watch(self) -> None:
        """Read the log for inbox messages and control requests from other processes every
        ``control_poll``, and at each notification of the store's ``watch`` when the run
        subscribed to it (:meth:`begin`), until cancelled."""
        tick = _Ticker(self.opts.clock, self.opts.control_poll, self._watch_from)
        async with anyio.create_task_group() as tg:
            if self._notified is not None:  # one task for the run, not one per wait
                tg.start_soon(self._read_when_notified, self._notified, name="watch notified")
            while True:
                await tick.wait()
                await self._poll_logged()

    async def _read_when_notified(self, notified: StoreWatch) -> None:
        """:meth:`poll` after each notification of the store's watch, until cancelled."""
        while True:
            await notified.wait()
            await self._poll_logged()

    async def _poll_logged(self) -> None:
        """:meth:`poll`, a failed read logged (the next tick or notification reads again);
        nothing once the run's last write has begun (its own checkpoint notifies, for one)."""
        if self.written_last:
            return
        try:
            with self.opts.clock.move_on_after(self._call_timeout) as bounded:
                await self.poll()
        except EventLogError as exc:  # a read can fail for a moment; the next poll retries
            _log.warning("control_poll_failed", error=type(exc).__name__)
        else:
            if bounded.cancelled_caught:
                _log.warning("control_poll_failed", error="TimeoutError")

    async def poll(self) -> None:
        """Read the inbox and control events appended since the last read, and obey them.

        A row that cannot be read is reported once and passed over: it must not blind the
        watch to every stop and inject after it.
        """
        async with self._reading:
            try:
                events = await self.log.read(self.key, after_seq=self.seen, kinds=WATCH_KINDS)
            except CorruptEvent:
                events = await self._read_past_bad_row()
            for event in events:
                if event.seq > self.seen:
                    self.seen = event.seq
                    self._on_event(event)

    async def _read_past_bad_row(self) -> list[Event]:
        """The readable events before the first bad row, one read each; the bad row is
        logged and marked seen (the events after it come with the next poll)."""
        events: list[Event] = []
        after = self.seen
        while True:
            try:
                batch = await self.log.read(self.key, after_seq=after, kinds=WATCH_KINDS, limit=1)
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

    async def append_last(self, events: list[Event], reason: StopReason | None = None) -> list[int]:
        """Append the run's last events (it ends with ``reason``), and drop the lease with
        them.

        The store's ``append_and_release`` does both (in one transaction, on SQLite and
        PostgreSQL). When this returns, the lease is no longer held; when it raises, the
        lease is still ours for :meth:`release` to drop. A lent lease stays held (its lender
        releases it) unless the lender allowed otherwise (:attr:`AdoptedLease.release_at_end`)
        and the run ends by itself: not ``context_cancelled`` (a stop, or its caller's
        cancellation), after which the lender may still write on the lease (a daemon hands
        the session back).
        """
        lease = self.lease
        adopted = self.adopted
        if self.lost:
            raise LeaseLost(str(self.key), "taken over by another holder")
        ended = reason is not StopReason.CONTEXT_CANCELLED
        lent = adopted is not None and not (adopted.release_at_end and ended)
        self.written_last = True  # from now on nothing the watch reads changes the run
        if lease is None or lent:
            seqs = await self.log.append(events, lease=lease)
        else:
            self.releasing = True
            seqs = await self.log.append_and_release(events, lease)
            self.lease = None
            if adopted is not None:
                adopted.mark_released()
        return seqs

    @property
    def holding(self) -> bool:
        """Whether :meth:`release` has a lease of ours to drop."""
        return self.lease is not None and not self.lost and self.adopted is None

    async def release(self) -> None:
        """Drop our lease row; never another holder's, nor a lent one. The caller bounds it
        (the run: within its last writes' time, shielded)."""
        if not self.holding:
            self.lease = None
            return
        lease, self.lease = self.lease, None
        assert lease is not None
        await self._release(lease)

    async def _release(self, lease: Lease) -> None:
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
