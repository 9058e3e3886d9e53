"""The daemon's claims: a fleet member that resumes a log's sessions when they are due.

How a claimed session is resumed is a subclass's: :class:`autonomous.fleet.Daemon` calls a
build function; ``autonomous daemon`` (``autonomous._cli._daemon``) reads the spec the session
recorded. The rest is here, the same for both.

A daemon is one member of a fleet: any number of them, on any hosts, may serve one log. Every
``poll`` seconds of its clock (and at once when the store's ``watch`` says something changed,
on PostgreSQL) it claims due sessions with the store's ``claim_due``: deferred ones waking
within the next poll and, unless told not to (``--deferred-only``), interrupted ones (a
checkpoint with no exit and no live holder: a process that crashed mid-run), as many as it has
free slots of ``max_concurrent``, earliest due first, each with its lease taken in the same
atomic step, so two daemons never run one session. Each claimed session is resumed in its own
task on that lease (``resume_autonomous(..., lease=AdoptedLease(...))``); one heartbeat renews
every lease the daemon holds in one ``renew_leases`` call a third of ``lease_ttl`` apart, and a
session whose lease was not renewed (another worker took it over after it expired) is stopped
as ``lease_lost``, writing nothing more. Its state is all in the log, so it survives its own
restart:

- a session another process holds (a live lease) is never claimed here; a lease left behind by
  a process of this host that has exited, or one past its expiry, is taken over;
- a session whose resume failed (a missing spec, a build error, a spec or schema this worker
  cannot run) is reported once, its lease released at once for another worker, and not tried
  here again until its latest checkpoint changes or a spec is adopted for it (``autonomous
  adopt --spec PATH SESSION`` records an edited or moved spec without running the session);
- a store that does not answer for a while (a restart, a failover) does not end the daemon:
  ``store_unavailable`` is reported once, the claims are tried again each poll, and
  ``store_available`` is reported when they succeed; a run that the store failed for a moment
  (``StoreUnavailable.transient``) is reported ``failed`` with ``retry_in`` and tried again
  that many seconds later, the wait doubling with each such failure up to an hour;
- a session stopped on purpose is never due; a paused one (a pause request came while it
  slept) is reported ``paused`` and left alone until ``autonomous unpause``;
- a run that returns has its lease released at once, then (the command's) runs the spec's
  ``on_exit`` hook, a failing one reported;
- stopped (:meth:`Claimer.stop`, cancelled, or the command's SIGINT or SIGTERM) the daemon
  stops its runs (each writes its final checkpoint), hands each one back as due (a
  ``deferred`` checkpoint authored ``autonomous-daemon``) and releases its lease at once, so
  the next daemon picks it up where this one left it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskGroup

from eventlog import (
    Checkpoint,
    Claim,
    CorruptEvent,
    Event,
    EventKind,
    EventLog,
    EventLogError,
    Lease,
    LeaseHolder,
    LeaseLost,
    SessionKey,
    StoreUnavailable,
    StoreWatch,
)
from eventlog import SessionSummary as Summary
from scheduler import Clock, SystemClock

from .._durable._durable import AdoptedLease, full_log
from .._errors import ConfigurationError
from .._logging import get_logger
from .._result import RunResult, StopReason

#: ``report(event, **fields)``: how a daemon tells what it does.
Report = Callable[..., None]

_AUTHOR = "autonomous-daemon"
#: Seconds (on the daemon's clock) that a stopped run's hand-back and lease release share.
_HAND_BACK_TIMEOUT = 5.0
#: Seconds (on the daemon's clock) a claim or a batched renewal may take: one in flight when
#: a shutdown comes never holds it longer (the next poll or beat tries again).
_CALL_TIMEOUT = 5.0
#: How many sessions run at once unless ``max_concurrent`` (``--max-concurrent``) says otherwise.
DEFAULT_MAX_CONCURRENT = 4
#: The daemon's leases last this long (seconds) unless ``lease_ttl`` (``--lease-ttl``) says so.
DEFAULT_LEASE_TTL = 30.0
#: Seconds between polls unless ``poll`` (``--poll``) says otherwise.
DEFAULT_POLL = 5.0
#: A reported cost is rounded to this many places (the float noise of a sum goes), as the
#: command shows costs (``autonomous._cli._decimals``).
USD_PLACES = 10
#: The longest wait before a session that the store failed for a moment is tried again.
_RETRY_MOST = 3600.0
_log = get_logger("autonomous")


@attrs.frozen
class _Retry:
    """When a session a transient store failure ended is tried again, and the wait before it."""

    at: datetime
    delay: float


@attrs.frozen
class _Failed:
    """Where a session's resume failed: its checkpoint's seq and the seq of its newest note
    then. It is not tried again until one of them changes: a new checkpoint, or a spec
    adopted for it (``autonomous adopt``, ``resume --spec``: a note)."""

    checkpoint_seq: int
    note_seq: int


def seconds(name: str, value: object) -> float:
    """``value`` (seconds or a timedelta) as seconds, > 0; else a ConfigurationError naming
    ``name``."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(
            f"{name} must be > 0 seconds (a number or a timedelta), got {value!r}"
        )
    return float(value)


class Claimer:
    """Claims and resumes due (and interrupted) sessions of one log, at most
    ``max_concurrent`` together, until stopped; it polls and reads "now" on ``clock``, and
    holds each claimed session on a lease of ``lease_ttl`` seconds that it renews itself.

    A subclass says how a claimed session is resumed (:meth:`_run`) and what follows a run
    that returned (:meth:`_finished`). Made inside the event loop; it runs once."""

    def __init__(
        self,
        log: EventLog,
        *,
        poll: float | timedelta,
        once: bool,
        interrupted: bool,
        report: Report,
        clock: Clock | None = None,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        lease_ttl: float | timedelta = DEFAULT_LEASE_TTL,
    ) -> None:
        # a store written to the protocol before its later members joined it is one all the same
        if not isinstance(full_log(log), EventLog):
            raise ConfigurationError(f"log must be an eventlog store (EventLog), got {log!r}")
        if (
            isinstance(max_concurrent, bool)
            or not isinstance(max_concurrent, int)
            or max_concurrent < 1
        ):
            raise ConfigurationError(
                f"max_concurrent must be a whole number of at least 1, got {max_concurrent!r}"
            )
        if not callable(report):
            raise ConfigurationError(f"report must be callable, got {report!r}")
        self._log = full_log(log)
        self._poll = seconds("poll", poll)
        self._once = once
        self._crashed = interrupted
        self._report = report
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._max = max_concurrent
        self._ttl = seconds("lease_ttl", lease_ttl)
        self._holder = LeaseHolder.this_process()
        self._held: dict[SessionKey, AdoptedLease] = {}  # the running sessions, by key
        self._holding = anyio.Event()  # set when a lease is held: the heartbeat starts
        self._failed: dict[SessionKey, _Failed] = {}  # where a resume failed, not to retry
        self._retry: dict[SessionKey, _Retry] = {}  # ended by the store failing for a moment
        self._paused: set[SessionKey] = set()  # reported paused, not run until unpaused
        self._paused_looked: datetime | None = None  # when the paused ones were last listed
        self._ran: set[SessionKey] = set()  # with ``once``: what this pass ran already
        self._freed = anyio.Event()  # set when a run ends: a slot for a waiting session
        # The last pass only let claims go: its own notifications must not end the next pause
        # (it would claim the same sessions again at once, and again).
        self._churned = False
        self._store_down = False  # the last claim pass failed on the store: reported
        self._scope = anyio.CancelScope()  # stop() cancels it: the run ends as on a signal
        self._started = False
        self._ended = False
        self._background: TaskGroup | None = None  # ``async with``'s group
        self._failure: Exception | None = None  # how the background run failed, if it did

    @property
    def running(self) -> bool:
        """Whether :meth:`run` has begun and not yet returned."""
        return self._started and not self._ended

    async def run(self) -> None:
        """Claim and resume until :meth:`stop` (or cancelled); with ``once``, what is due now
        (in turn when there are more than the slots), then wait for its runs and return.

        Stopped, the daemon stops its runs (each writes its final checkpoint), hands each one
        back as due and releases its lease, then returns. A daemon runs once (RuntimeError
        after that: make another)."""
        if self._started:
            raise RuntimeError("a Daemon runs once: make another to run again")
        self._started = True
        if self._scope.cancel_called:  # stopped before it began: nothing to start or stop
            self._ended = True
            return
        try:
            with self._scope:
                await self._serve()
        finally:
            self._ended = True

    def stop(self) -> None:
        """Stop the daemon: :meth:`run` stops its runs, hands them back and returns (at once
        when it has not begun). Idempotent; safe from any task of the daemon's event loop."""
        self._scope.cancel()

    async def __aenter__(self) -> Self:
        """Run the daemon in the background of the ``async with`` block."""
        group = anyio.create_task_group()
        await group.__aenter__()
        group.start_soon(self._run_in_background, name="daemon")
        self._background = group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the daemon and wait until its run has returned; then raise its failure, if
        it failed and the block raised nothing itself. The block's own error comes out as
        itself: the group is not told of it (it would wrap it in an exception group)."""
        self.stop()
        group, self._background = self._background, None
        if group is None:
            return
        # The hand-back of the daemon's runs must finish even if the block was cancelled.
        group.cancel_scope.shield = True
        await group.__aexit__(None, None, None)
        if self._failure is not None and exc is None:
            raise self._failure

    async def _run_in_background(self) -> None:
        """:meth:`run`, its failure kept for ``__aexit__``: a failing daemon must not cancel
        the block it runs beside (a cancellation the block could not tell from its own)."""
        try:
            await self.run()
        except Exception as exc:
            self._failure = exc

    async def _serve(self) -> None:
        """Claim and resume until cancelled; with ``once``, until the pass is done."""
        self._report("daemon_started", poll=self._poll, once=self._once, max_concurrent=self._max)
        async with self._log.watch(None) as watch, anyio.create_task_group() as beat:
            beat.start_soon(self._heartbeat, name="daemon leases")
            async with anyio.create_task_group() as runs:
                while True:
                    self._freed = anyio.Event()  # before starting any: no end goes unseen
                    more = await self._claim_pass(runs)
                    if self._once and not more:
                        break
                    await self._pause(watch)
            beat.cancel_scope.cancel()

    async def _claim_pass(self, runs: TaskGroup) -> bool:
        """:meth:`_claim`, through a store that may not answer for a while (a restart, a
        failover): reported once when it stops answering and once when it answers again,
        tried again at the next poll. With ``once`` the error ends the pass."""
        try:
            more = await self._claim(runs)
        except StoreUnavailable as exc:
            if self._once:
                raise
            if not self._store_down:
                self._store_down = True
                self._report("store_unavailable", error=str(exc), retry_in=self._poll)
            return True
        if self._store_down:
            self._store_down = False
            self._report("store_available")
        return more

    async def _claim(self, runs: TaskGroup) -> bool:
        """Claim up to the free slots' worth of due sessions and start them; whether more may
        be due than were taken (every slot filled)."""
        free = self._max - len(self._held)
        if free <= 0:
            return True
        now = self._clock.now()
        ahead = 0.0 if self._once else self._poll
        skip = len(self._failed) + len(self._ran) + len(self._retry)  # claimed to be let go
        claims = await self._claim_due(now + timedelta(seconds=ahead), free + skip)
        started = 0
        for claim in claims:
            key = claim.summary.key
            if await self._left_alone(claim.summary, now):
                await self._release(key, AdoptedLease(claim.lease))
            elif len(self._held) < self._max:
                self._start(runs, claim)
                started += 1
            else:  # more came than the slots (the skipped ones were not among them)
                await self._release(key, AdoptedLease(claim.lease))
        self._churned = bool(claims) and not started
        if len(claims) < free + skip:  # every due session is taken: some may be paused
            await self._report_paused(now, ahead)
            return False
        return True

    async def _left_alone(self, summary: Summary, now: datetime) -> bool:
        """Whether a claimed session is let go at once: its resume failed at this checkpoint
        and no spec was adopted for it since, ``once`` ran it already, or the store failed its
        last run for a moment and its wait is not over."""
        key = summary.key
        retry = self._retry.get(key)
        if key in self._ran or (retry is not None and now < retry.at):
            return True
        failed = self._failed.get(key)
        if failed is None or failed.checkpoint_seq != summary.checkpoint_seq:
            return False
        if failed.note_seq == await self._note_seq(key):
            return True
        del self._failed[key]  # a spec adopted since: try it
        return False

    async def _note_seq(self, key: SessionKey) -> int:
        """The seq of the session's newest note (0: none; -1: not readable here, a newer
        schema's, say): a spec adopted for it is one."""
        try:
            notes = await self._log.read_last(key, [EventKind.NOTE], 1)
        except CorruptEvent:  # the resume reports what is wrong with the session
            return -1
        return notes[-1].seq if notes else 0

    async def _claim_due(self, now: datetime, limit: int) -> list[Claim]:
        """The store's claim, shielded so that its result is known: on a shutdown meanwhile,
        what it took is released at once rather than left to expire. A claim the store does
        not answer within ``_CALL_TIMEOUT`` is :class:`StoreUnavailable` (what it may have
        taken expires): a shutdown waits for it no longer."""
        claims: list[Claim] | None = None
        with anyio.CancelScope(shield=True), self._clock.move_on_after(_CALL_TIMEOUT):
            claims = await self._log.claim_due(
                now, self._holder, self._ttl, limit=limit, interrupted=self._crashed
            )
        if claims is None:
            raise StoreUnavailable(
                f"no answer to a claim within {_CALL_TIMEOUT:g} s", transient=True
            )
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            for claim in claims:
                await self._release(claim.lease.key, AdoptedLease(claim.lease))
            raise
        return claims

    def _start(self, runs: TaskGroup, claim: Claim) -> None:
        """Hold a claimed session's lease and resume the session in a task of ``runs``."""
        key = claim.summary.key
        # The run's final checkpoint releases the lease with it (one trip, not two).
        self._held[key] = AdoptedLease(claim.lease, release_at_end=True)
        self._holding.set()
        if self._once:
            self._ran.add(key)
        runs.start_soon(self._resume, claim.summary, self._held[key], name=f"resume {key}")

    async def _pause(self, watch: StoreWatch) -> None:
        """Until the next poll is due on the clock, a run ends and frees a slot, or the
        store's watch says something changed (PostgreSQL's do), unless the last pass only
        let claims go (the watch would wake for those)."""

        async def until(event: anyio.Event | StoreWatch, scope: anyio.CancelScope) -> None:
            """End the pause when ``event`` comes."""
            await event.wait()
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(until, self._freed, tg.cancel_scope)
            if not self._churned:
                tg.start_soon(until, watch, tg.cancel_scope)
            await self._clock.sleep_until(self._clock.now() + timedelta(seconds=self._poll))
            tg.cancel_scope.cancel()

    async def _report_paused(self, now: datetime, ahead: float) -> None:
        """Report each due session left alone because it is paused, once (until unpaused),
        so an operator sees why it does not run. Listed at most once a poll: the list is of
        every due session, those others are running too (a busy fleet's claims come many
        times a second)."""
        looked = self._paused_looked
        if looked is not None and now < looked + timedelta(seconds=self._poll):
            return
        self._paused_looked = now
        paused = {
            s.key for s in await self._log.due_sessions(now + timedelta(seconds=ahead)) if s.paused
        }
        for key in sorted(paused - self._paused, key=str):
            self._report("paused", session=str(key), hint="autonomous unpause SESSION")
        self._paused = paused

    async def _heartbeat(self) -> None:
        """Renew every lease the daemon holds in one call, a third of ``lease_ttl`` apart,
        while it holds any; a session left out of the renewal is told its lease is lost."""
        every = timedelta(seconds=self._ttl / 3)
        while True:
            if not self._held:
                self._holding = anyio.Event()
                await self._holding.wait()
            await self._clock.sleep_until(self._clock.now() + every)
            held = {key: lent for key, lent in self._held.items() if not lent.released}
            if not held:
                continue
            leases = [a.lease for a in held.values()]
            renewed: list[Lease] | None = None
            try:  # bounded: a renewal in flight must not hold a shutdown
                with self._clock.move_on_after(_CALL_TIMEOUT):
                    renewed = await self._log.renew_leases(leases, self._ttl)
            except EventLogError as exc:  # busy, say: the next beat tries again; expiry decides
                _log.warning("lease_renewal_failed", error=type(exc).__name__)
                continue
            if renewed is None:  # no answer in time: the same
                _log.warning("lease_renewal_failed", error="TimeoutError")
                continue
            by_key = {lease.key: lease for lease in renewed}
            for key, adopted in held.items():
                if key in by_key:
                    adopted.renewed(by_key[key])
                elif self._held.get(key) is adopted:  # still running here: stop it, lost
                    adopted.lose()

    async def _resume(self, summary: Summary, adopted: AdoptedLease) -> None:
        """Resume one claimed session on its lease, report how it went, run its hook; a
        failure is reported, never raised. The lease is released as soon as the run ends."""
        key = summary.key
        wake = summary.next_wake_at
        self._report("resuming", session=str(key), due=wake.isoformat() if wake else None)
        retry: float | None = None
        note_seq = 0  # a failure to read it fails the resume, tried again once it reads
        by: float | None = None  # when a shutdown's hand-back and release must be done
        try:
            try:
                # before the spec is read: a spec adopted after this read is tried again
                note_seq = await self._note_seq(key)
                result = await self._run(summary, adopted)
            except anyio.get_cancelled_exc_class():
                by = self._clock.monotonic() + _HAND_BACK_TIMEOUT
                with anyio.CancelScope(shield=True), self._within(by):
                    await self._hand_back(summary, adopted)
                raise
            except Exception as exc:
                # Marked before the release, whose notification wakes the claims: they must
                # find the session failed (or waiting), never start it again at once.
                retry = self._mark_failed(summary, exc, note_seq)
                raise
            finally:
                await self._release(key, adopted, by=by)  # at once: the hook may take a while
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # a bad session must not bring the daemon down
            error = self._error_text(exc)
            later = {} if retry is None else {"retry_in": retry}
            self._report("failed", session=str(key), error=error, **later)
        else:
            self._retry.pop(key, None)
            await self._finished(key, result)

    def _mark_failed(self, summary: Summary, exc: Exception, note_seq: int) -> float | None:
        """Keep a session whose resume failed from starting again at once; the seconds until
        it is tried again, or None: not here until its checkpoint changes or a spec is adopted
        for it (a note after ``note_seq``, its newest note before the resume).

        A store that failed for a moment (``StoreUnavailable.transient``: a connection lost,
        a server restarting) is not the session's fault: it is tried again a poll later, then
        after twice the wait before, up to an hour (each try may cost a model call the lost
        write did not record). Any other failure is the session's or its spec's, for an
        operator to mend.
        """
        key = summary.key
        if isinstance(exc, StoreUnavailable) and exc.transient:
            last = self._retry.get(key)
            most = max(_RETRY_MOST, self._poll)
            delay = self._poll if last is None else min(last.delay * 2, most)
            self._retry[key] = _Retry(self._clock.now() + timedelta(seconds=delay), delay)
            return delay
        self._failed[key] = _Failed(summary.checkpoint_seq, note_seq)
        return None

    async def _release(
        self, key: SessionKey, adopted: AdoptedLease, *, by: float | None = None
    ) -> None:
        """Stop holding a session: off the heartbeat, its slot free (the claims are woken at
        once, before the release's own notification could wake them: one wake, not two), and
        its lease released (unless lost), within ``_HAND_BACK_TIMEOUT`` or by ``by`` (the
        clock's monotonic time a shutdown's hand-back shares with it)."""
        if self._held.get(key) is adopted:
            del self._held[key]
            self._freed.set()
        if adopted.lost or adopted.released:
            return
        if by is None:
            by = self._clock.monotonic() + _HAND_BACK_TIMEOUT
        with anyio.CancelScope(shield=True), self._within(by):
            try:
                await self._log.release_lease(adopted.lease)
            except EventLogError as exc:  # it expires by itself
                _log.warning("lease_release_failed", error=type(exc).__name__)

    def _within(self, by: float) -> contextlib.AbstractContextManager[anyio.CancelScope]:
        """A scope cancelled at ``by`` (the clock's monotonic time), at once when it passed."""
        return self._clock.move_on_after(max(by - self._clock.monotonic(), 0.0))

    def _error_text(self, exc: Exception) -> str:
        """How a failed resume's error is reported: ``Type: message``."""
        return f"{type(exc).__name__}: {exc}"

    async def _run(self, summary: Summary, adopted: AdoptedLease) -> RunResult:
        """Resume a claimed session on its lease (``resume_autonomous(..., lease=adopted)``);
        an exception is a failed resume, reported once and not tried again here until the
        session's checkpoint changes or a spec is adopted for it."""
        raise NotImplementedError

    async def _finished(self, key: SessionKey, result: RunResult) -> None:
        """After a run that returned, its lease released: report how it ended."""
        latest = await self._log.latest_checkpoint(key)
        cp = latest.payload if latest is not None else None
        # the error as the runtime recorded it (bounded, its secrets masked), else the result's
        recorded = cp.error if isinstance(cp, Checkpoint) else ""
        raised = f"{type(result.error).__name__}: {result.error}" if result.error else None
        self._report_end(key, result, recorded or raised)

    def _report_end(self, key: SessionKey, result: RunResult, error: str | None) -> None:
        """Report a run that returned: ``failed``, with its error, when the retry policy gave
        up on it; else ``finished``."""
        wake = result.next_wake_at
        self._report(
            "failed" if result.reason == StopReason.RETRY_POLICY_ABORTED else "finished",
            session=str(key),
            reason=result.reason.value,
            turns=result.turns,
            cost_usd=round(result.cost_usd, USD_PLACES),
            next_wake_at=wake.isoformat() if wake else None,
            error=error,
        )

    async def _hand_back(self, summary: Summary, adopted: AdoptedLease) -> None:
        """After a shutdown stopped a run: make the session due again, where it stopped
        (written on the run's lease, so a session lost meanwhile is left to its new holder)."""
        latest = await self._log.latest_checkpoint(summary.key)
        if adopted.lost or latest is None or latest.seq == summary.checkpoint_seq:
            return  # nothing ran: the session is as due as it was
        cp = latest.payload
        if not isinstance(cp, Checkpoint) or cp.stop_reason not in (None, "context_cancelled"):
            return  # it finished or deferred itself
        now = self._clock.now()
        wake = summary.next_wake_at if summary.next_wake_at and summary.next_wake_at > now else now
        handed = attrs.evolve(cp, stop_reason="deferred", next_wake_at=wake)
        with contextlib.suppress(LeaseLost):
            event = Event.create(summary.key, handed, author=_AUTHOR)
            await self._log.append([event], lease=adopted.lease)
            self._report("handed_back", session=str(summary.key), due=wake.isoformat())
