"""AutonomousHandle: control and observe a started run from any task (or thread, via anyio)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs

from permissions import Caller

from .._callers import to_originator
from .._errors import ConfigurationError
from .._progress import ProgressEvent
from .._result import AutonomousStatus, RunResult
from ._run import Run


@attrs.define(eq=False, repr=False)
class AutonomousHandle:
    """The control surface of a run started with :func:`start_autonomous`.

    Every method is safe from any task; from another thread use ``anyio.from_thread.run``
    (``request_wake`` may be called from any thread directly). pause, resume and stop are
    idempotent; pause, resume and inject after the run ended raise :class:`RunFinished`.
    """

    _run: Run

    async def ready(self) -> None:
        """Return once the agent is built and the run is going; raise the build error if not."""
        controls = self._run.controls
        await controls.ready.wait()
        if controls.failure is not None:
            raise controls.failure

    async def inject(self, message: str) -> None:
        """Queue ``message`` for the next turn's ``[Inbox]`` block and wake a sleeping run.

        The message is in the event log before this returns, so a crash cannot lose it.
        """
        await self._run.controls.inject(message, None)

    async def inject_as(self, message: str, caller: Caller) -> None:
        """:meth:`inject` with the message's originator, passed to the permission gate."""
        if not isinstance(caller, Caller):
            raise ConfigurationError(f"inject_as needs a permissions.Caller, got {caller!r}")
        await self._run.controls.inject(message, to_originator(caller))

    async def pause(self) -> None:
        """Park the loop at the next turn boundary; returns once it has parked (or ended)."""
        await self._run.controls.request_pause()

    async def resume(self) -> None:
        """Let a paused run go on (a no-op when it is not paused)."""
        await self._run.controls.request_resume()

    def request_wake(self) -> None:
        """End a scheduled sleep now (no message); a no-op before start and after the end."""
        self._run.controls.request_wake()

    @property
    def status(self) -> AutonomousStatus:
        """The run's lifecycle state now."""
        return self._run.controls.status

    @property
    def session_id(self) -> str | None:
        """The run's session id once the agent is built."""
        return self._run.key.session_id if self._run.key is not None else None

    async def stop(self) -> None:
        """Cancel the run (an in-flight model call too); returns once the loop has unwound."""
        await self._run.controls.request_stop()

    async def wait(self) -> RunResult:
        """Wait for the end and return the result; raises the run's own failure (a build error)."""
        controls = self._run.controls
        await controls.done.wait()
        if controls.failure is not None:
            raise controls.failure
        assert self._run.result is not None
        return self._run.result

    def events(self) -> AsyncIterator[ProgressEvent]:
        """A stream of progress events from now until the run ends; several readers may listen."""
        return self._run.observer.subscribe()

    def __repr__(self) -> str:
        return f"<AutonomousHandle status={self.status.value} session={self.session_id}>"
