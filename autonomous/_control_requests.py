"""The control side of a run: pause, resume, stop, inject and wake, from the handle or the log."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import anyio

from eventlog import Control, Event, EventLog, InboxQueued, Originator, SessionKey, new_event_id

from ._errors import ConfigurationError, RunFinished
from ._inbox import Inbox, InboxMessage, Wake
from ._progress import Paused, ProgressHub, Resumed
from ._result import AutonomousStatus, RunResult

if TYPE_CHECKING:
    from ._conversation import Conversation

#: The author of events the in-process handle writes; the log watcher skips these.
HANDLE_AUTHOR = "handle"


class Latch:
    """A set-once flag whose waiters each park on a bare future of the running loop.

    ``anyio.Event`` makes an ``asyncio.Event`` and its deque up front: most of what a handle's
    ``wait()`` held per parked run. The library targets asyncio, so a future per waiter does.
    """

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def set(self) -> None:
        """Set the flag and wake every waiter; idempotent (call it on the loop's thread)."""
        self._set = True
        waiters, self._waiters = self._waiters, None
        for future in waiters or ():
            if not future.done():
                future.set_result(None)

    def is_set(self) -> bool:
        """True once set."""
        return self._set

    def wait(self) -> Awaitable[None]:
        """Wait until the flag is set (a checkpoint when it already is): ``await latch.wait()``.

        A plain method handing out the future itself: a waiter holds no coroutine frame of ours.
        """
        if self._set:
            return anyio.lowlevel.checkpoint()
        future = asyncio.get_running_loop().create_future()
        # Drop the futures of waiters that were cancelled; the live ones stay.
        waiters = [f for f in self._waiters if not f.done()] if self._waiters else []
        waiters.append(future)
        self._waiters = waiters
        return future


class RunControls:
    """Pause, resume, stop, inject and wake for :class:`Run` (a mixin: Run owns the state)."""

    __slots__ = (
        "_phase", "_scope", "_unpause", "_wake", "conv", "done", "failure", "hub", "inbox",
        "key", "log", "parked", "paused", "ready", "result", "status", "stop_requested",
    )  # fmt: skip

    inbox: Inbox
    hub: ProgressHub
    ready: Latch
    done: Latch
    status: AutonomousStatus
    result: RunResult | None
    failure: BaseException | None
    stop_requested: bool
    paused: bool
    parked: bool
    key: SessionKey | None
    conv: Conversation | None
    log: Any
    _phase: anyio.Event | None
    _unpause: anyio.Event | None
    _scope: anyio.CancelScope | None
    _wake: Wake | None

    def _notify(self) -> None:
        event, self._phase = self._phase, None
        if event is not None:
            event.set()

    def _set_idle(self, idle: bool) -> None:
        self.parked = idle
        if idle and self.paused:
            self.status = AutonomousStatus.PAUSED
        self._notify()

    async def _park(self, turn: int, pause_max: float = 0.0) -> bool:
        """Park while paused; False when the pause outlived ``pause_max`` (0 = no limit)."""
        if not self.paused:
            return True
        self.parked = True
        self.status = AutonomousStatus.PAUSED
        self._notify()
        self.log.info("paused", turn=turn)
        if self.hub.active:
            await self.hub.emit(turn, Paused(turn))
        try:
            with anyio.move_on_after(pause_max or None) as scope:
                while self.paused:
                    if self._unpause is None:
                        self._unpause = anyio.Event()
                    await self._unpause.wait()
        finally:
            self.parked = False
            self._notify()
        if scope.cancelled_caught:
            self.log.warning("pause_max_exceeded", turn=turn, pause_max=pause_max)
            return False
        self.log.info("resumed", turn=turn)
        if self.hub.active:
            await self.hub.emit(turn, Resumed(turn))
        return True

    def _set_paused(self, paused: bool) -> bool:
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
        if self._set_paused(True):
            await self._control_note("pause", caller)
        while not (self.parked or self.done.is_set() or not self.paused):
            if self._phase is None:
                self._phase = anyio.Event()
            await self._phase.wait()
        if self.parked and self.paused and not self.done.is_set():
            self.status = AutonomousStatus.PAUSED

    async def request_resume(self, caller: Originator | None = None) -> None:
        """Let a paused loop go on; a no-op when not paused."""
        self._check_live("resume")
        if self._set_paused(False):
            await self._control_note("resume", caller)

    def cancel(self) -> None:
        """Stop the run without waiting (safe from inside the run's own tasks)."""
        if not self.stop_requested and not self.done.is_set():
            self.stop_requested = True
            self.status = AutonomousStatus.STOPPED
            if self._scope is not None:
                self._scope.cancel()

    async def request_stop(self) -> None:
        """Cancel the run and return once it has unwound; idempotent."""
        self.cancel()
        await self.done.wait()

    def request_wake(self) -> None:
        """Interrupt a scheduled sleep (safe from any thread)."""
        if self._wake is not None:
            self._wake.request()

    async def inject(self, text: str, caller: Originator | None) -> None:
        """Append an inbox message to the log (durably), then queue it and wake the loop."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigurationError("inject needs a non-blank message")
        self._check_live("inject")
        await self.ready.wait()
        if self.failure is not None:
            raise RunFinished("the run failed to start; nothing to inject into") from self.failure
        self._check_live("inject")
        assert self.conv is not None and self.key is not None
        message_id = new_event_id()
        event = Event.create(
            self.key, InboxQueued(message_id, text, caller), author=_author(caller)
        )
        (seq,) = await self.conv.log.append([event])
        self.inbox.add(InboxMessage(message_id, text, caller, seq))
        self.request_wake()

    def _check_live(self, what: str) -> None:
        if self.done.is_set() or self.result is not None:
            raise RunFinished(f"cannot {what}: the run has ended ({self.status})")

    async def _control_note(
        self, action: str, caller: Originator | None, *, author: str = "", detail: str = ""
    ) -> None:
        if self.conv is None or self.key is None:
            return
        who = f"{HANDLE_AUTHOR}:{author}" if author else _author(caller)
        event = Event.create(self.key, Control(action, caller, detail), author=who)
        await self.conv.log.append([event])

    def apply_remote(self, event: Event) -> None:
        """Obey an inbox message or control request another process wrote to the log."""
        p = event.payload
        if isinstance(p, InboxQueued):
            if self.inbox.add(InboxMessage(p.message_id, p.text, p.caller, event.seq)):
                self.request_wake()
        elif isinstance(p, Control) and not event.author.startswith(HANDLE_AUTHOR):
            self.log.info("remote_control", action=p.action, author=event.author)
            if p.action == "pause":
                self._set_paused(True)
            elif p.action == "resume":
                self._set_paused(False)
            elif p.action == "stop":
                self.cancel()
            elif p.action == "wake":
                self.request_wake()


def _author(caller: Originator | None) -> str:
    who = caller.identity if caller is not None and caller.identity else ""
    return f"{HANDLE_AUTHOR}:{who}" if who else HANDLE_AUTHOR


async def latest_control_seq(log: EventLog, key: SessionKey) -> int:
    """The seq of the session's newest inbox or control event (0: none)."""
    from eventlog import EventKind

    last = await log.read_last(key, [EventKind.INBOX_QUEUED, EventKind.CONTROL], 1)
    return last[0].seq if last else 0
