"""The entry points: run_autonomous, start_autonomous, resume_autonomous."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Unpack

import anyio

from eventlog import SessionRef
from permissions import GateWouldDeadlock as _GateDeadlock

from ._agent import BuildFn, RebuildFn
from ._errors import ConfigurationError, GateWouldDeadlock
from ._handle import AutonomousHandle
from ._options import RunKwargs, RunOptions, make_options
from ._result import RunResult
from ._run import Run


def _prepare(build: object, goal: object, options: RunKwargs) -> RunOptions:
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


async def run_autonomous(build: BuildFn, goal: str, **options: Unpack[RunKwargs]) -> RunResult:
    """Build an agent and run it turn after turn until it is done or a limit stops it.

    ``build(extra_tools)`` (sync or async) must return an :class:`Agent` whose tools include
    ``extra_tools`` (the done tool, and the schedule tool when a scheduler is set). Every stop
    reason is returned as a :class:`RunResult`; a failing build raises :class:`BuildError`;
    the caller's own cancellation propagates after the final checkpoint is written.
    """
    opts = _prepare(build, goal, options)
    return await Run(build, goal, opts).execute()


def start_autonomous(
    build: BuildFn, goal: str, **options: Unpack[RunKwargs]
) -> AbstractAsyncContextManager[AutonomousHandle]:
    """Start a run in the background; ``async with start_autonomous(...) as handle:``.

    Leaving the block stops a run that is still going and waits for it to unwind (like Go's
    ``defer h.Stop()``). An error raised in the block comes out of it as itself, after that.
    The run's own failure is raised by ``ready()`` and ``wait()``, not by leaving the block.
    Misuse (a blank goal, a bad option) raises here, at once.
    """
    opts = _prepare(build, goal, options)
    return _Started(Run(build, goal, opts))


async def resume_autonomous(
    build: RebuildFn, ref: SessionRef, *, force: bool = False, **options: Unpack[RunKwargs]
) -> RunResult:
    """Continue a session from its latest checkpoint, budgets carried forward.

    ``build(extra_tools, session_id)`` must return an Agent on that session. Takes the
    session lease first (:class:`eventlog.SessionLocked` when another live holder has it).
    A session that completed returns its stored result at once; so does one that was stopped
    on purpose (``context_cancelled``, status ``stopped``) unless ``force=True``.
    """
    if not isinstance(ref, SessionRef):
        raise ConfigurationError(f"resume_autonomous needs a SessionRef, got {ref!r}")
    opts = _prepare(build, "resume", options)
    return await Run(build, "", opts, resume=ref, force=force).execute()


class _Started:
    """What start_autonomous returns: entering starts the run in a task, leaving stops it.

    The run's task is the block's child, as in a task group: it starts on entering, and
    leaving the block (however it is left) stops it if it is still going and waits until it
    has ended. It is a plain asyncio task, not one of an anyio task group: the group, its
    scopes and its task handle held about 3 KiB per run, a sixth of a parked run's memory.
    A class, not an asynccontextmanager, for the same reason.
    """

    __slots__ = ("_run", "_task")

    def __init__(self, run: Run) -> None:
        self._run = run
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AutonomousHandle:
        if self._task is not None:
            raise RuntimeError("a start_autonomous(...) context can be entered only once")
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(_supervise(self._run), name="autonomous run")
        return AutonomousHandle(self._run)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task = self._task
        assert task is not None
        with anyio.CancelScope(shield=True):
            if not self._run.done.is_set():
                await self._run.request_stop()
            if not task.done():  # ends right after the run: its last step is the return
                await asyncio.wait((task,))
        if exc is None and not task.cancelled():
            error = task.exception()  # a BaseException the run let out (never an Exception)
            if error is not None:
                raise error


async def _supervise(run: Run) -> None:
    # The run keeps its own failure; ready() and wait() raise it, leaving the block must not.
    with contextlib.suppress(Exception):
        await run.execute()
