"""The control side of a run: pause, resume, stop, inject and wake, from the handle or the log."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

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

from ._errors import RunFinished
from ._inbox import Inbox, InboxMessage, Wake, check_inject, inject_event
from ._progress import Paused, Resumed
from ._result import AutonomousStatus

if TYPE_CHECKING:
    from scheduler import Clock

    from ._conversation import Conversation
    from ._observer import Observer

#: The author of events the in-process handle writes; the log watcher skips these.
HANDLE_AUTHOR = "handle"


class ControlAction(enum.StrEnum):
    """What a control event asks of a run (the value is what the log stores)."""

    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"
    WAKE = "wake"


@attrs.define(eq=False)
class Latch:
    """A set-once flag; the event behind it is made by the first waiter (most latches of a
    run are never waited for, and an idle event costs more than the rest of a small run)."""

    _set: bool = attrs.field(default=False, init=False)
    _event: anyio.Event | None = attrs.field(default=None, init=False)

    def set(self) -> None:
        """Set the flag and wake every waiter; idempotent (call it on the loop's thread)."""
        self._set = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        """True once set."""
        return self._set

    async def wait(self) -> None:
        """Wait until the flag is set (a checkpoint when it already is)."""
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


@attrs.define(eq=False)
class RunControls:
    """Pause, resume, stop, inject and wake for one run, and the status they change.

    The handle calls the ``request_*`` methods and :meth:`inject`; the log watch calls
    :meth:`apply_remote`; the loop parks in :meth:`park` and marks its sleeps with
    :meth:`set_idle`; the run sets :attr:`scope`, :attr:`conv` and the end.
    """

    inbox: Inbox
    #: The run's observer: pauses and resumes are reported to it (and its bound logger).
    observer: Observer
    status: AutonomousStatus = AutonomousStatus.RUNNING
    stop_requested: bool = False
    paused: bool = False
    #: The loop is parked (paused, or asleep until a wake).
    parked: bool = False
    #: The run has its result: control requests are refused from now on.
    ended: bool = False
    #: The run's own failure (a failing build), raised by the handle's ready() and wait().
    failure: BaseException | None = None
    ready: Latch = attrs.field(factory=Latch)
    done: Latch = attrs.field(factory=Latch)
    #: The run's cancel scope, once it runs.
    scope: anyio.CancelScope | None = None
    #: The wake signal, made when the run starts (it belongs to the run's event loop).
    wake: Wake | None = None
    #: The session's conversation, once the agent is built (injects go to its log).
    conv: Conversation | None = None
    # Made on first use: an idle Event costs more memory than the rest of a small run.
    _phase: anyio.Event | None = attrs.field(default=None, init=False)
    _unpause: anyio.Event | None = attrs.field(default=None, init=False)

    def _notify(self) -> None:
        event, self._phase = self._phase, None
        if event is not None:
            event.set()

    def end(self) -> None:
        """The run has unwound: wake everything that waits for it."""
        self.ready.set()
        self.done.set()
        self._notify()

    def set_idle(self, idle: bool) -> None:
        """Mark the loop asleep (or awake again): a paused sleeping run reports ``paused``."""
        self.parked = idle
        if idle and self.paused:
            self.status = AutonomousStatus.PAUSED
        self._notify()

    async def park(self, turn: int, clock: Clock, pause_max: float = 0.0) -> bool:
        """Park while paused; False when the pause outlived ``pause_max`` seconds on ``clock``
        (0 = no limit)."""
        if not self.paused:
            return True
        self.parked = True
        self.status = AutonomousStatus.PAUSED
        self._notify()
        await self.observer.emit(Paused(turn))
        try:
            with clock.move_on_after(pause_max or None) as scope:
                while self.paused:
                    if self._unpause is None:
                        self._unpause = anyio.Event()
                    await self._unpause.wait()
        finally:
            self.parked = False
            self._notify()
        if scope.cancelled_caught:
            self.observer.log.warning("pause_max_exceeded", turn=turn, pause_max=pause_max)
            return False
        await self.observer.emit(Resumed(turn))
        return True

    def set_paused(self, paused: bool) -> bool:
        """Flip the pause request; True when it changed."""
        if self.paused == paused:
            return False
        self.paused = paused
        if paused:
            self._unpause = None
        else:
            self.status = AutonomousStatus.RUNNING
            if self._unpause is not None:
                self._unpause.set()
            self._notify()
        return True

    async def request_pause(self, caller: Originator | None = None) -> None:
        """Ask the loop to park at the next turn boundary; returns once it has (or ended)."""
        self._check_live("pause")
        if self.set_paused(True):
            await self.note(ControlAction.PAUSE, caller)
        while not (self.parked or self.done.is_set() or not self.paused):
            if self._phase is None:
                self._phase = anyio.Event()
            await self._phase.wait()
        if self.parked and self.paused and not self.done.is_set():
            self.status = AutonomousStatus.PAUSED

    async def request_resume(self, caller: Originator | None = None) -> None:
        """Let a paused loop go on; a no-op when not paused."""
        self._check_live("resume")
        if self.set_paused(False):
            await self.note(ControlAction.RESUME, caller)

    def cancel(self) -> None:
        """Stop the run without waiting (safe from inside the run's own tasks)."""
        if not self.stop_requested and not self.done.is_set():
            self.stop_requested = True
            self.status = AutonomousStatus.STOPPED
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
        if self.done.is_set() or self.ended:
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
