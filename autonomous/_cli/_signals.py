"""SIGINT and SIGTERM for the CLI's commands: the first one stops the work cleanly (a run writes
its final checkpoint), every later one waits for that, so a double Ctrl-C, ``timeout`` or systemd
signalling the process group never kills a run halfway through its shutdown; and the process's
exit once the command is done (:func:`exit_status`), which no abandoned thread may hold up."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType
from typing import TypeVar

import anyio
import attrs

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@attrs.define
class Shutdown:
    """The process's shutdown request: the first signal's number, and what it cancels.

    The handlers are plain ``signal.signal`` ones, installed for the whole command (before the
    event loop starts and after it ends, when asyncio's own would have put the defaults back):
    a signal during start-up or teardown is recorded, never a ``KeyboardInterrupt``. The status
    is the first handled signal's. Two different signals that arrive together are usually
    handled in signal-number order (CPython's), SIGINT's first; but the kernel may hand them to
    different threads of the process (a store's or the event loop's workers), so in a storm of
    both either may come first.
    """

    signum: int | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _targets: list[anyio.CancelScope] = attrs.Factory(list)
    _settled: bool = False  # the work is over: later signals change nothing
    _noted: bool = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler (main thread, between bytecodes): hand over to the loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._arrived, signum)
        elif self.signum is None:
            self.signum = signum

    def _arrived(self, signum: int) -> None:
        """On the loop: the first signal cancels the work; later ones are noted once."""
        if self.signum is None:
            self.signum = signum
            if not self._settled and self._targets:
                self._targets[0].cancel()  # the work when there is some, else the command
        elif not self._noted and not self._settled:
            self._noted = True
            print("stopping: waiting for the final checkpoint", file=sys.stderr, flush=True)

    async def guard(self, command: Callable[[], Awaitable[int]]) -> int | None:
        """Run ``command`` on this loop; None when the first signal cancelled it outright."""
        self._loop = asyncio.get_running_loop()
        with anyio.CancelScope() as scope:
            self._targets.append(scope)
            if self.signum is not None:
                scope.cancel()
            return await command()
        return None

    async def until_signal(self, work: Callable[[], Awaitable[T]]) -> tuple[T | None, int | None]:
        """Run ``work`` until it returns or the first signal (then cancel it, cleanly).

        Returns ``(result, None)`` or ``(None, signal number)``: cancelled work unwinds first
        (a run writes its final checkpoint). Signals after it returns change nothing: what
        follows (a summary) is short.
        """
        if self.signum is not None:
            return None, self.signum
        result: list[T] = []
        with anyio.CancelScope() as scope:
            self._targets.insert(0, scope)  # the work, not the whole command
            try:
                result.append(await work())
            finally:
                self._targets.remove(scope)
                self._settled = True
        return (result[0], None) if result else (None, self.signum)


#: The shutdown of the command in progress (its tasks see it: anyio.run copies the context).
_current: ContextVar[Shutdown] = ContextVar("autonomous_cli_shutdown")


@contextmanager
def handling_signals(*, restore: bool) -> Iterator[Shutdown]:
    """Install the handlers for one command; put the old ones back after it when ``restore``.

    The console script does not restore them: a signal between the command's end and the
    process's exit would otherwise be a ``KeyboardInterrupt`` traceback.
    """
    shutdown = Shutdown()
    token = _current.set(shutdown)
    previous = {signum: signal.signal(signum, shutdown.handle) for signum in SIGNALS}
    try:
        yield shutdown
    finally:
        _current.reset(token)
        if restore:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


async def until_signal(work: Callable[[], Awaitable[T]]) -> tuple[T | None, int | None]:
    """:meth:`Shutdown.until_signal` of the command in progress."""
    return await _current.get().until_signal(work)


def exit_status(code: int) -> int:
    """The process's exit, once the command returned ``code``: that status for ``sys.exit``,
    or, when threads that are not daemons still run, an exit right now with it.

    The command has returned, so everything durable is done: each run wrote its final
    checkpoint (or said it could not), a daemon handed its sessions back, and every store was
    closed when its ``async with`` block ended. What may still run is work a stop abandoned
    in a thread, which cannot be cancelled: a tool that offloaded a blocking call to anyio's
    worker threads (they are not daemons), a prompt waiting for a line on the terminal, an
    import of litellm. Python's own exit joins every such thread first, so the process
    would hang on for as long as the abandoned call runs (a tool's ``tool_timeout`` is five
    minutes by default; systemd kills a unit that takes longer than 90 s to stop and marks it
    failed). Nothing is lost by not waiting: the command no longer reads what they return.

    So in that case the exit is ``os._exit``, after what an exit would do before it: the
    ``atexit`` functions (OpenTelemetry's span export, logging's flush, ...) and the flush
    of standard output and error. Without such threads it is the ordinary exit.
    """
    if not _held_by_threads():
        return code
    try:
        atexit._run_exitfuncs()  # what Python's exit runs, bar joining the threads
    finally:
        for stream in (sys.stdout, sys.stderr):
            # closed, or its reader went away: there is nothing more to do with it
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def _held_by_threads() -> bool:
    """Whether a thread that is not a daemon (nor the main thread) still runs."""
    main = threading.main_thread()
    return any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())
