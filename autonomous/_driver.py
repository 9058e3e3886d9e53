"""The entry points: run_autonomous, start_autonomous, resume_autonomous."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from eventlog import SessionRef
from permissions import GateWouldDeadlock as _GateDeadlock

from ._errors import ConfigurationError, GateWouldDeadlock
from ._handle import AutonomousHandle
from ._options import RunOptions, make_options
from ._result import RunResult
from ._run import Run


def _prepare(build: Any, goal: Any, options: dict[str, Any]) -> RunOptions:
    if not callable(build):
        raise ConfigurationError(f"build must be a callable returning an Agent, got {build!r}")
    if not isinstance(goal, str) or not goal.strip():
        raise ConfigurationError("goal must be a non-blank string")
    opts = make_options(options)
    if opts.permissions_gate is not None:
        try:
            opts.permissions_gate.startup_check()
        except _GateDeadlock as exc:
            raise GateWouldDeadlock(str(exc)) from exc
    return opts


async def run_autonomous(build: Callable[..., Any], goal: str, **options: Any) -> RunResult:
    """Build an agent and run it turn after turn until it is done or a limit stops it.

    ``build(extra_tools)`` (sync or async) must return an :class:`Agent` whose tools include
    ``extra_tools`` (the done tool, and the schedule tool when a scheduler is set). Every stop
    reason is returned as a :class:`RunResult`; a failing build raises :class:`BuildError`;
    the caller's own cancellation propagates after the final checkpoint is written.
    """
    opts = _prepare(build, goal, options)
    return await Run(build, goal, opts).execute()


def start_autonomous(
    build: Callable[..., Any], goal: str, **options: Any
) -> AbstractAsyncContextManager[AutonomousHandle]:
    """Start a run in the background; ``async with start_autonomous(...) as handle:``.

    Leaving the block stops a run that is still going and waits for it to unwind (like Go's
    ``defer h.Stop()``). The run's own failure is raised by ``ready()`` and ``wait()``, not by
    leaving the block. Misuse (a blank goal, a bad option) raises here, at once.
    """
    opts = _prepare(build, goal, options)
    return _Started(Run(build, goal, opts))


async def resume_autonomous(
    build: Callable[..., Any], ref: SessionRef, **options: Any
) -> RunResult:
    """Continue a session from its latest checkpoint, budgets carried forward.

    ``build(extra_tools, session_id)`` must return an Agent on that session. Takes the
    session lease first (:class:`eventlog.SessionLocked` when another live holder has it).
    """
    if not isinstance(ref, SessionRef):
        raise ConfigurationError(f"resume_autonomous needs a SessionRef, got {ref!r}")
    opts = _prepare(build, "resume", options)
    return await Run(build, "", opts, resume=ref).execute()


class _Started:
    """What start_autonomous returns: entering starts the run in a task group, leaving stops it.

    A class, not an asynccontextmanager: while a run is live the suspended generator frame and
    its wrapper would hold more memory than these two slots.
    """

    __slots__ = ("_run", "_tg")

    def __init__(self, run: Run) -> None:
        self._run = run
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> AutonomousHandle:
        if self._tg is not None:
            raise RuntimeError("a start_autonomous(...) context can be entered only once")
        self._tg = tg = anyio.create_task_group()
        await tg.__aenter__()
        try:
            # A fixed name: by default anyio would build one string per task from the function.
            tg.start_soon(_supervise, self._run, name="autonomous run")
        except BaseException as exc:  # never leave the group open on the caller's task
            await tg.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return AutonomousHandle(self._run)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        if not self._run.done.is_set():
            with anyio.CancelScope(shield=True):
                await self._run.request_stop()
        return await self._tg.__aexit__(exc_type, exc, tb)


async def _supervise(run: Run) -> None:
    # The run keeps its own failure; ready() and wait() raise it, the task group must not.
    with contextlib.suppress(Exception):
        await run.execute()
