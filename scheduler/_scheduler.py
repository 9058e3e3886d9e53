"""The Scheduler protocol and the two bundled schedulers: sleep in-process, or exit deferred."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

import anyio
import attrs

from ._clock import Clock, SystemClock


class SchedulerError(Exception):
    """Root of the scheduler package's errors."""


class Defer(SchedulerError):
    """Raised (or returned) by a scheduler to end the run ``deferred`` until the wake time."""


@attrs.frozen
class ScheduleEvent:
    """The model's request to be woken: when, with which prompt, and why."""

    wake_at: datetime
    next_prompt: str = ""
    detail: str = ""
    turn: int = 0


@runtime_checkable
class Waker(Protocol):
    """The run's wake signal as a scheduler sees it."""

    def undelivered(self) -> int:
        """How many inbox messages wait for the model."""
        ...

    def consume(self) -> bool:
        """Clear a pending wake request; True when one was pending."""
        ...

    async def wait(self) -> None:
        """Return when a wake is requested (inject, ``request_wake``, a control event)."""
        ...


@runtime_checkable
class Scheduler(Protocol):
    """Decides what happens between a turn that asked to be woken later and the next turn.

    Return ``None`` to go on with the next turn now, or return / raise :class:`Defer` to end the
    run ``deferred``; anything else raised is a scheduler error for the retry policy.
    """

    async def wait(self, event: ScheduleEvent, waker: Waker) -> Defer | None:
        """Wait for the wake time (or not)."""
        ...


class SleepScheduler:
    """Sleeps in-process until the wake time; an inject or a wake request ends the sleep early.

    A wake requested before the sleep began does not skip it, unless an inbox message is still
    undelivered (then the next turn starts at once to deliver it).
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()

    async def wait(self, event: ScheduleEvent, waker: Waker) -> Defer | None:
        """Sleep until ``event.wake_at`` or a wake, whichever comes first."""
        waker.consume()
        if waker.undelivered():
            return None
        async with anyio.create_task_group() as tg:

            async def _sleep() -> None:
                await self.clock.sleep_until(event.wake_at)
                tg.cancel_scope.cancel()

            async def _wake() -> None:
                await waker.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(_sleep)
            tg.start_soon(_wake)
        return None


class ExitOnDeferScheduler:
    """Ends the run ``deferred`` with ``next_wake_at`` set; an orchestrator resumes it later."""

    async def wait(self, event: ScheduleEvent, waker: Waker) -> Defer | None:
        """Always defer."""
        return Defer(f"deferred until {event.wake_at.isoformat()}")
