"""The entry points: run_autonomous, start_autonomous, resume_autonomous."""

from __future__ import annotations

import contextlib
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Unpack

import anyio
import attrs
from anyio.abc import TaskGroup

from eventlog import SessionRef
from permissions import GateWouldDeadlock as _GateDeadlock

from .._agent import BuildFn, RebuildFn
from .._durable._durable import AdoptedLease
from .._errors import ConfigurationError, GateWouldDeadlock
from .._options import BUDGET_NAMES, RunKwargs, RunOptions, make_options
from .._result import RunResult
from ._handle import AutonomousHandle
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
    build: RebuildFn,
    ref: SessionRef,
    *,
    force: bool = False,
    lease: AdoptedLease | None = None,
    **options: Unpack[RunKwargs],
) -> RunResult:
    """Continue a session from its latest checkpoint, budgets carried forward.

    ``build(extra_tools, session_id)`` must return an Agent on that session. Takes the
    session lease first (:class:`eventlog.SessionLocked` when another live holder has it),
    unless ``lease`` lends it one already held (a daemon's claim: :class:`AdoptedLease`),
    which the run fences its appends with but leaves to the lender to renew and release.
    A session that completed returns its stored result at once; so does one that was stopped
    on purpose (``context_cancelled``, status ``stopped``) unless ``force=True``.

    The session's budgets are the ones recorded in its log: a budget keyword given here
    (``max_turns``, ``max_input_tokens``, ``max_output_tokens``, ``max_cost_usd``,
    ``max_wallclock``) changes the session's, and the change is recorded; the others are the
    recorded ones (a session from before budgets were recorded runs under the options').
    """
    if not isinstance(ref, SessionRef):
        raise ConfigurationError(f"resume_autonomous needs a SessionRef, got {ref!r}")
    if lease is not None and not isinstance(lease, AdoptedLease):
        raise ConfigurationError(f"lease must be an AdoptedLease, got {lease!r}")
    if lease is not None and lease.lease.key != ref.key:
        raise ConfigurationError(f"lease is of session {lease.lease.key}, not of {ref.key}")
    opts = _prepare(build, "resume", options)
    given = frozenset(name for name in BUDGET_NAMES if name in options)
    run = Run(build, "", opts, resume=ref, force=force, lease=lease, budgets_given=given)
    return await run.execute()


@attrs.define(eq=False)
class _Started:
    """What start_autonomous returns: entering starts the run in a task group, leaving stops it.

    The group is entered by ``__aenter__`` and left by ``__aexit__``, so the run's task is
    the block's child: leaving the block (however it is left) stops the run if it is still
    going and waits until its task has ended. The task is shielded from the block's own
    cancellation: the caller's cancellation stops the run through :meth:`RunControls.cancel`
    (status ``stopped``), as any other way out of the block does.
    """

    _run: Run
    _tg: TaskGroup | None = attrs.field(default=None, init=False)

    async def __aenter__(self) -> AutonomousHandle:
        if self._tg is not None:
            raise RuntimeError("a start_autonomous(...) context can be entered only once")
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(_supervise, self._run, name="autonomous run")
        return AutonomousHandle(self._run)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg = self._tg
        assert tg is not None
        # The block is over: nothing of it runs in the group's scope any more, and the stop
        # and the wait for the run's task must not be cut short by a cancellation.
        tg.cancel_scope.shield = True
        try:
            await self._run.controls.request_stop()
        finally:
            try:  # the block's own error (exc) comes out as itself: the group is not told
                await tg.__aexit__(None, None, None)
            except BaseExceptionGroup as group:  # a BaseException the run let out
                if exc is None:
                    raise group.exceptions[0] from None


async def _supervise(run: Run) -> None:
    # The run keeps its own failure; ready() and wait() raise it, leaving the block must not.
    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        await run.execute()
