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

    Sleepers wake when ``advance`` moves time past their deadline. With ``autojump`` every
    sleep jumps time forward to its deadline at once, so a test of a one-hour sleep takes no
    real time. Every sleep means every one: a durable run's lease renewal and log watch sleep
    on the run's clock too, so with autojump they push time ahead while the run waits for
    anything else (a model call, a tool), and a wall-clock budget runs out early. Drive such
    runs with :meth:`advance`.
    """

    def __init__(self, start: datetime | None = None, *, autojump: bool = False) -> None:
        self._start = start if start is not None else datetime(2030, 1, 1, tzinfo=UTC)
        self._offset = 0.0
        self.autojump = autojump
        self._sleepers: list[tuple[datetime, anyio.Event]] = []
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
        due = [ev for when, ev in self._sleepers if when <= now]
        self._sleepers = [(w, ev) for w, ev in self._sleepers if w > now]
        expired = [scope for when, scope in self._timers if when <= now]
        self._timers = [(w, scope) for w, scope in self._timers if w > now]
        for ev in due:
            ev.set()
        for scope in expired:
            scope.cancel()

    @property
    def sleepers(self) -> int:
        """How many tasks are asleep on this clock (tests wait for a sleep to begin)."""
        return len(self._sleepers)

    async def sleep_until(self, when: datetime) -> None:
        """Block until ``advance`` reaches ``when`` (or jump there with ``autojump``)."""
        if when <= self.now():
            await anyio.lowlevel.checkpoint()
            return
        if self.autojump:
            self.advance((when - self.now()).total_seconds())
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        entry = (when, event)
        self._sleepers.append(entry)
        try:
            await event.wait()
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    @contextmanager
    def move_on_after(self, seconds: float | None) -> Iterator[anyio.CancelScope]:
        """A cancel scope cancelled once this clock passes ``seconds`` from now (None: never).

        Fake time moves by :meth:`advance` (or a sleep's autojump), so a test of a timeout
        takes no real time: advance past the deadline and the scope's body is cancelled.
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
