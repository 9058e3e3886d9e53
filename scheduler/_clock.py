"""Clocks: the real one, and a controllable one for tests of budgets, sleeps and leases."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

import anyio


@runtime_checkable
class Clock(Protocol):
    """Where the runtime reads time and sleeps; swap it to make time-dependent logic testable."""

    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for budgets)."""
        ...

    async def sleep_until(self, when: datetime) -> None:
        """Return once ``now() >= when`` (at once when it already is); always a cancellation
        point, so that a loop of sleeps can be cancelled however late it runs."""
        ...

    def move_on_after(self, seconds: float | None) -> AbstractContextManager[anyio.CancelScope]:
        """A cancel scope that is cancelled ``seconds`` from now on this clock (None: never),
        like :func:`anyio.move_on_after`: the runtime's timeouts run on its clock."""
        ...


class SystemClock:
    """The real clock: ``datetime.now(UTC)``, ``time.monotonic`` and anyio sleeps."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    async def sleep_until(self, when: datetime) -> None:
        """Sleep (cancellably) until ``when``; a cancellation point even when it is due.

        A loop of sleeps that are already due (a renewal that took longer than its period)
        must still let a cancellation in, or it could never be stopped: ``anyio.sleep(0)``
        is a checkpoint.
        """
        await anyio.sleep(max((when - self.now()).total_seconds(), 0.0))

    def move_on_after(self, seconds: float | None) -> AbstractContextManager[anyio.CancelScope]:
        """:func:`anyio.move_on_after` itself."""
        return anyio.move_on_after(seconds)


class FakeClock:
    """A clock that moves only when told: ``advance()``, or by itself with ``autojump=True``.

    Sleepers wake when ``advance`` moves time past their deadline, and a ``move_on_after``
    scope is cancelled when time passes its deadline.

    With ``autojump`` the clock works like trio's ``MockClock`` with an autojump threshold of
    0: once every task of the event loop is blocked (:func:`anyio.wait_all_tasks_blocked`)
    while a task sleeps on this clock, time jumps to the nearest deadline, a sleep's or a
    scope's; a test of a one-hour sleep takes no real time. Time never moves while some task
    can still run, so a durable run's lease renewal and log watch, which sleep on the run's
    clock, wait their turn instead of pushing time ahead of the run's work (and a wall-clock
    budget with it). The sleepers themselves drive the jumps: no task of the clock's own is
    needed, and a clock nobody sleeps on stays still.

    What counts as blocked is the event loop's view: a task waiting on a worker thread (a
    sync tool, SQLite's connection thread) or on a socket is blocked, so time may jump while
    real I/O is in flight, as it does in trio. Tests that mind keep their I/O in memory
    (``MemoryEventLog``, ``ScriptedModel``) or drive the clock with :meth:`advance`.
    """

    def __init__(self, start: datetime | None = None, *, autojump: bool = False) -> None:
        self._start = start if start is not None else datetime(2030, 1, 1, tzinfo=UTC)
        self._offset = 0.0
        self.autojump = autojump
        self._sleepers: list[_Sleeper] = []
        self._timers: list[tuple[datetime, anyio.CancelScope]] = []

    def now(self) -> datetime:
        """The fake UTC time."""
        return self._start + timedelta(seconds=self._offset)

    def monotonic(self) -> float:
        """Fake seconds since the clock was made."""
        return self._offset

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance({seconds}))")
        self._offset += seconds
        now = self.now()
        due = [sleeper for sleeper in self._sleepers if sleeper.when <= now]
        self._sleepers = [sleeper for sleeper in self._sleepers if sleeper.when > now]
        expired = [scope for when, scope in self._timers if when <= now]
        self._timers = [(w, scope) for w, scope in self._timers if w > now]
        for sleeper in due:
            sleeper.wake()
        for scope in expired:
            scope.cancel()

    @property
    def sleepers(self) -> int:
        """How many tasks are asleep on this clock (tests wait for a sleep to begin)."""
        return len(self._sleepers)

    async def sleep_until(self, when: datetime) -> None:
        """Block until time reaches ``when``: by ``advance``, or, with ``autojump``, by a jump
        made once every other task is blocked; a checkpoint when ``when`` is already past."""
        if when <= self.now():
            await anyio.lowlevel.checkpoint()
            return
        sleeper = _Sleeper(when)
        self._sleepers.append(sleeper)
        try:
            if not self.autojump:
                await sleeper.woken.wait()
                return
            # Every autojumping sleeper may make the jump; whichever finds the loop idle
            # first does, and the others see time moved. A jump only ever goes to the
            # nearest deadline, so two sleepers jumping in turn never skip a deadline.
            while not sleeper.woken.is_set():
                with anyio.CancelScope() as sleeper.looking:
                    await anyio.wait_all_tasks_blocked()
                sleeper.looking = None
                if not sleeper.woken.is_set():
                    self._jump()
        finally:
            if sleeper in self._sleepers:
                self._sleepers.remove(sleeper)

    def _jump(self) -> None:
        """Move time to the nearest deadline of a sleeper or a scope (autojump)."""
        now = self.now()
        deadlines = [sleeper.when for sleeper in self._sleepers]
        deadlines += [when for when, _ in self._timers]
        ahead = [when for when in deadlines if when > now]
        if ahead:
            self.advance((min(ahead) - now).total_seconds())

    @contextmanager
    def move_on_after(self, seconds: float | None) -> Iterator[anyio.CancelScope]:
        """A cancel scope cancelled once this clock passes ``seconds`` from now (None: never).

        Fake time moves by :meth:`advance` (or an autojump, which may stop at this deadline),
        so a test of a timeout takes no real time: past the deadline the body is cancelled.
        """
        with anyio.CancelScope() as scope:
            if seconds is None:
                yield scope
                return
            entry = (self.now() + timedelta(seconds=seconds), scope)
            self._timers.append(entry)
            if seconds <= 0:
                scope.cancel()
            try:
                yield scope
            finally:
                if entry in self._timers:
                    self._timers.remove(entry)


class _Sleeper:
    """A task asleep on a :class:`FakeClock` until ``when``.

    While an autojumping sleeper looks whether the loop is idle it is not waiting on
    ``woken``; a wake cancels that look too, so that the task can run at once: else it
    would still look blocked to the other sleepers, and they would jump time on past the
    deadline it was woken for, before it ran.
    """

    def __init__(self, when: datetime) -> None:
        self.when = when
        self.woken = anyio.Event()
        self.looking: anyio.CancelScope | None = None

    def wake(self) -> None:
        """Time reached ``when``: let the task run."""
        self.woken.set()
        if self.looking is not None:
            self.looking.cancel()
