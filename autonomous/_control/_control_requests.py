"""The control side of a run: pause, resume, stop, inject and wake, from the handle or the log."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from eventlog import (
    Control,
    Event,
    EventKind,
    EventLog,
    InboxQueued,
    Originator,
    SessionKey,
)

from .._errors import RunFinished
from .._progress import Paused, Resumed
from .._result import AutonomousStatus, StopReason
from ._inbox import Inbox, InboxMessage, Wake, check_inject, inject_event

if TYPE_CHECKING:
    from scheduler import Clock

    from .._observe._observer import Observer
    from .._state._conversation import Conversation
    from .._state._run_state import Lifecycle, StateCell

#: The author of events the in-process handle writes; the log watcher skips these.
HANDLE_AUTHOR = "handle"


class ControlAction(enum.StrEnum):
    """What a control event asks of a run (the value is what the log stores)."""

    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"
    WAKE = "wake"


@attrs.define(eq=False)
class RunControls:
    """Pause, resume, stop, inject and wake for one run: the inputs from outside the loop.

    The handle calls the ``request_*`` methods and :meth:`inject`; the log watch calls
    :meth:`apply_remote`; the loop parks in :meth:`park` and marks its sleeps with
    :meth:`set_idle`; the run sets :attr:`scope`, :attr:`conv`, a lost lease and the end.
    What they change is the :class:`~autonomous._state._run_state.Lifecycle` part of the run's one
    state, each time through :meth:`_change`; the status is derived from it, never stored.
    """

    inbox: Inbox
    #: The run's observer: pauses and resumes are reported to it (and its bound logger).
    observer: Observer
    #: The run's state, whose lifecycle part the controls change.
    cell: StateCell
    #: Set once the run is going (or failed to start).
    ready: anyio.Event = attrs.field(factory=anyio.Event)
    #: Set once the run has unwound.
    done: anyio.Event = attrs.field(factory=anyio.Event)
    #: The run's cancel scope, once it runs.
    scope: anyio.CancelScope | None = None
    #: The wake signal, made when the run starts (it belongs to the run's event loop).
    wake: Wake | None = None
    #: The session's conversation, once the agent is built (injects go to its log).
    conv: Conversation | None = None
    #: Set, and replaced, at every change of the lifecycle: what waiters for one wait on.
    _changed: anyio.Event = attrs.field(factory=anyio.Event, init=False)

    @property
    def life(self) -> Lifecycle:
        """The lifecycle part of the run's state."""
        return self.cell.state.life

    @property
    def status(self) -> AutonomousStatus:
        """The run's status, derived from its lifecycle."""
        return self.life.status

    @property
    def paused(self) -> bool:
        """A pause is asked for (the loop parks at its next turn boundary)."""
        return self.life.paused

    @property
    def stop_requested(self) -> bool:
        """A stop was asked for."""
        return self.life.stop_requested

    @property
    def failure(self) -> BaseException | None:
        """The run's own failure (a failing build), raised by the handle's ready() and wait()."""
        return self.life.failure

    def _change(self, **changes: Any) -> None:
        """The one place the lifecycle changes: the new value, then every waiter woken."""
        self.cell.evolve(life=self.life.changed(**changes))
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def finish(self, reason: StopReason, *, stopped: bool = False) -> None:
        """The run ended for ``reason`` (``stopped``: on purpose); requests are refused now."""
        self._change(ended=reason, stop_requested=self.stop_requested or stopped)

    def fail(self, failure: BaseException) -> None:
        """The run failed with ``failure`` (its handle raises it)."""
        self._change(failure=failure)

    def end(self) -> None:
        """The run has unwound: wake everything that waits for it."""
        self.ready.set()
        self.done.set()
        self._notify()

    def set_idle(self, idle: bool) -> None:
        """Mark the loop asleep (or awake again): a paused sleeping run reports ``paused``."""
        self._change(parked=idle)

    async def park(self, turn: int, clock: Clock, pause_max: float = 0.0) -> bool:
        """Park while paused; False when the pause outlived ``pause_max`` seconds on ``clock``
        (0 = no limit)."""
        if not self.paused:
            return True
        self._change(parked=True)
        await self.observer.emit(Paused(turn))
        try:
            with clock.move_on_after(pause_max or None) as scope:
                while self.paused:
                    await self._changed.wait()
        finally:
            self._change(parked=False)
        if scope.cancelled_caught:
            self.observer.log.warning("pause_max_exceeded", turn=turn, pause_max=pause_max)
            return False
        await self.observer.emit(Resumed(turn))
        return True

    def set_paused(self, paused: bool) -> bool:
        """Flip the pause request; True when it changed."""
        if self.paused == paused:
            return False
        self._change(paused=paused)
        return True

    async def request_pause(self, caller: Originator | None = None) -> None:
        """Ask the loop to park at the next turn boundary; returns once it has (or ended)."""
        self._check_live("pause")
        if self.set_paused(True):
            await self.note(ControlAction.PAUSE, caller)
        while not (self.life.parked or self.done.is_set() or not self.paused):
            await self._changed.wait()

    async def request_resume(self, caller: Originator | None = None) -> None:
        """Let a paused loop go on; a no-op when not paused."""
        self._check_live("resume")
        if self.set_paused(False):
            await self.note(ControlAction.RESUME, caller)

    def cancel(self) -> None:
        """Stop the run without waiting (safe from inside the run's own tasks)."""
        if not self.stop_requested and not self.done.is_set():
            self._change(stop_requested=True)
            if self.scope is not None:
                self.scope.cancel()

    def lose_lease(self) -> None:
        """Another holder has the session now: stop the run, which ends ``lease_lost``."""
        self._change(lease_lost=True)
        if self.scope is not None:
            self.scope.cancel()

    async def request_stop(self) -> None:
        """Cancel the run and return once it has unwound; idempotent."""
        self.cancel()
        await self.done.wait()

    def request_wake(self) -> None:
        """Interrupt a scheduled sleep (safe from any thread)."""
        if self.wake is not None:
            self.wake.request()

    async def inject(self, text: str, caller: Originator | None) -> None:
        """Append an inbox message to the log (durably), then queue it and wake the loop."""
        check_inject(text)
        self._check_live("inject")
        await self.ready.wait()
        if self.failure is not None:
            raise RunFinished("the run failed to start; nothing to inject into") from self.failure
        self._check_live("inject")
        assert self.conv is not None
        message_id, event = inject_event(self.conv.key, text, caller, via=HANDLE_AUTHOR)
        (seq,) = await self.conv.log.append([event])
        self.inbox.add(InboxMessage(message_id, text, caller, seq))
        self.request_wake()

    def _check_live(self, what: str) -> None:
        if self.done.is_set() or self.life.ended is not None:
            raise RunFinished(f"cannot {what}: the run has ended ({self.status})")

    async def note(
        self,
        action: ControlAction,
        caller: Originator | None,
        *,
        author: str = "",
        detail: str = "",
    ) -> None:
        """Append a control event for ``action`` (what readers of the log see of it)."""
        if self.conv is None:
            return
        who = f"{HANDLE_AUTHOR}:{author}" if author else _author(caller)
        event = Event.create(self.conv.key, Control(action.value, caller, detail), author=who)
        await self.conv.log.append([event])

    def apply_remote(self, event: Event) -> None:
        """Obey an inbox message or control request another process wrote to the log."""
        p = event.payload
        if isinstance(p, InboxQueued):
            if self.inbox.add(InboxMessage(p.message_id, p.text, p.caller, event.seq)):
                self.request_wake()
        elif isinstance(p, Control) and not event.author.startswith(HANDLE_AUTHOR):
            self.observer.log.info("remote_control", action=p.action, author=event.author)
            if p.action == ControlAction.PAUSE:
                self.set_paused(True)
            elif p.action == ControlAction.RESUME:
                self.set_paused(False)
            elif p.action == ControlAction.STOP:
                self.cancel()
            elif p.action == ControlAction.WAKE:
                self.request_wake()


def _author(caller: Originator | None) -> str:
    who = caller.identity if caller is not None and caller.identity else ""
    return f"{HANDLE_AUTHOR}:{who}" if who else HANDLE_AUTHOR


async def latest_control_seq(log: EventLog, key: SessionKey) -> int:
    """The seq of the session's newest inbox or control event (0: none)."""
    last = await log.read_last(key, [EventKind.INBOX_QUEUED, EventKind.CONTROL], 1)
    return last[0].seq if last else 0
