"""The turn loop of a run: budgets, hooks, pause, inbox, one turn, what follows, the wait.

Functions over the run's state (its :class:`StateCell`), handed the parts they talk to as one
:class:`LoopDeps`; the run owns the exits and checkpoints and hands them in. The loop awaits and
records: a turn's attempt returns a :class:`TurnOutcome`, and what follows it is decided by
:func:`~._decide.next_step`, whose :class:`~._decide.Next` the loop carries
out (the new state, the inbox delivered, the checkpoint).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Protocol

import anyio
import attrs

from eventlog import InboxDelivered
from permissions import Caller
from scheduler import Defer, ScheduleEvent, SleepScheduler
from usage import Pricing

from .._agent import Agent
from .._callers import to_caller
from .._control._control_requests import ControlAction, RunControls
from .._control._inbox import InboxMessage
from .._observe._observer import Observer
from .._observe._supervisor import AbortRun, PauseRun, Steer, consult, steer_message
from .._options import RunOptions
from .._progress import Sleeping, TurnFinished, TurnStarted, Woke
from .._result import RetryDecision, RunResult, StopReason
from .._state._conversation import Conversation
from .._state._history import INTERRUPTED
from .._state._run_state import RunState, StateCell
from .._tools._exit_tools import ExitTools
from ._decide import (
    Attempt,
    Finish,
    Retry,
    Seen,
    Spending,
    Step,
    TurnOutcome,
    Wait,
    budget_before_turn,
    ends_completed,
    next_step,
    turn_prompt,
)
from ._summary import Compactor
from ._tool_table import ToolTable
from ._turn import TurnRunner


class Exit(Protocol):
    """End the run for ``reason``: the result, after the final checkpoint."""

    def __call__(
        self, reason: StopReason, error: BaseException | None = None, *, why: str = ""
    ) -> Awaitable[RunResult]: ...


class WriteCheckpoint(Protocol):
    """Append a checkpoint of the run's state (None: the run goes on)."""

    def __call__(
        self, stop_reason: StopReason | None, *, next_wake_at: datetime | None = None
    ) -> Awaitable[None]: ...


@attrs.frozen
class LoopDeps:
    """What the loop talks to (its state is in the :class:`StateCell` handed beside it)."""

    opts: RunOptions
    conv: Conversation
    controls: RunControls
    exit_tools: ExitTools
    observer: Observer
    pricing: Pricing
    #: Seconds since this process started the run.
    elapsed: Callable[[], float]
    #: Read what other processes appended to the inbox since the log watch last looked.
    poll_inbox: Callable[[], Awaitable[None]]
    checkpoint: WriteCheckpoint
    exit: Exit
    #: The run's tools when MCP servers add to the agent's own (None: the agent's tools).
    tool_table: ToolTable | None = None
    #: Summarises what the history window cuts (None: cut turns are simply dropped).
    compactor: Compactor | None = None


async def run_loop(deps: LoopDeps, cell: StateCell, agent: Agent) -> RunResult:
    """Wait out a resumed session's sleep, then run turns until an exit; the result."""
    if cell.state.next_wake_at is not None:  # a resumed, deferred session: wait for its time
        await _wait_resumed(deps, cell, cell.state.next_wake_at)
    runner = _runner(deps, cell.state, agent)
    deps.observer.run_started(deps.opts.max_turns)
    while True:
        reason = budget_before_turn(deps.opts, cell.state, deps.elapsed())
        if reason is not None:
            return await deps.exit(reason)
        await anyio.lowlevel.checkpoint()
        turn = _next_turn(cell.state)
        aborted = await _supervise(deps, cell, turn)
        if aborted is not None:
            return aborted
        hook_error = await _before_turn(deps, turn)
        if hook_error is not None:
            return await deps.exit(StopReason.RETRY_POLICY_ABORTED, hook_error)
        if deps.controls.paused and cell.state.resumed_turn is None:
            await deps.checkpoint(None)  # says paused, to readers of the log
        if not await deps.controls.park(turn, deps.opts.clock, deps.opts.pause_max):
            why = f"paused longer than pause_max={deps.opts.pause_max:g} s"
            return await deps.exit(StopReason.ABORTED, why=why)
        # Time passed while parked: a cap may have been reached.
        reason = budget_before_turn(deps.opts, cell.state, deps.elapsed())
        if reason is not None:
            return await deps.exit(reason)
        with deps.observer.turn_span(turn):
            step = await _turn(deps, cell, runner, turn)
        if isinstance(step, Finish):
            return await deps.exit(step.reason, step.error)
        if isinstance(step, Retry) and step.delay:
            await _back_off(deps, step.delay)
        if isinstance(step, Wait):
            finished = await _wait(deps, cell, step)
            if finished is not None:
                return finished


def _runner(deps: LoopDeps, state: RunState, agent: Agent) -> TurnRunner:
    tools = agent.tools if deps.tool_table is None else deps.tool_table.tools()
    return TurnRunner(
        model=agent.model,
        tools={t.name: t for t in tools},
        specs=[t.spec() for t in tools],
        exit_tools=deps.exit_tools,
        conv=deps.conv,
        opts=deps.opts,
        pricing=deps.pricing,
        tracker=deps.opts.tracker,
        gate=deps.opts.permissions_gate,
        meter=state.meter,
        elapsed=deps.elapsed,
        observer=deps.observer,
        tool_table=deps.tool_table,
    )


async def _wait_resumed(deps: LoopDeps, cell: StateCell, wake_at: datetime) -> None:
    """Sleep until ``wake_at``; an inject or a wake request ends it early.

    The same wait as :class:`scheduler.SleepScheduler`'s, so a resumed deferred session and a
    sleeping one wake by the same rules.
    """
    assert deps.controls.wake is not None
    turns = cell.state.meter.spent.turns
    await deps.observer.emit(Sleeping(turns, wake_at))
    deps.controls.set_idle(True)
    try:
        await SleepScheduler(clock=deps.opts.clock).wait(ScheduleEvent(wake_at), deps.controls.wake)
    finally:
        deps.controls.set_idle(False)
    cell.evolve(next_wake_at=None)
    await deps.observer.emit(Woke(turns))


def _next_turn(state: RunState) -> int:
    """The number of the turn about to run (a resumed, unfinished turn and a retried one keep
    their own)."""
    if state.resumed_turn is not None:
        return state.resumed_turn.turn
    if state.retrying is not None:
        return state.retrying.turn
    return state.meter.spent.turns + 1


async def _before_turn(deps: LoopDeps, turn: int) -> BaseException | None:
    if deps.opts.before_turn is not None:
        try:
            await deps.opts.before_turn(turn)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            deps.observer.log.warning("before_turn_failed", turn=turn, error=type(exc).__name__)
            return exc
    return None


async def _supervise(deps: LoopDeps, cell: StateCell, turn: int) -> RunResult | None:
    """Consult the supervisor at the turn boundary; an abort ends the run here."""
    opts, recent = deps.opts, deps.observer.recent
    if opts.supervisor is None or recent is None:
        return None
    spent = cell.state.meter.spent
    snapshot = recent.snapshot(turn, caps=opts, spent=spent, elapsed=deps.elapsed())
    decision = await consult(
        opts.supervisor, snapshot, timeout=opts.supervisor_timeout, clock=opts.clock
    )
    if isinstance(decision, Steer):
        deps.observer.log.info("supervisor_steer", turn=turn)
        cell.evolve(steer=steer_message(decision.message))
    elif isinstance(decision, PauseRun):
        deps.observer.log.info("supervisor_pause", turn=turn, reason=decision.reason)
        if deps.controls.set_paused(True):
            await deps.controls.note(
                ControlAction.PAUSE, None, author="supervisor", detail=decision.reason
            )
    elif isinstance(decision, AbortRun):
        deps.observer.log.warning("supervisor_abort", turn=turn, reason=decision.reason)
        return await deps.exit(StopReason.ABORTED, why=decision.reason)
    return None


async def _turn(deps: LoopDeps, cell: StateCell, runner: TurnRunner, turn: int) -> Step:
    """Run one attempt of ``turn``, then do what :func:`next_step` decides follows it."""
    state = cell.state
    inbox = deps.controls.inbox
    resumed, retrying = state.resumed_turn, state.retrying
    cell.evolve(resumed_turn=None, retrying=None)
    if resumed is not None:  # its prompt and answers are in the conversation already
        batch = tuple(m for m in inbox.snapshot() if m.message_id in resumed.inbox_ids)
        runner.resume_with(turn, resumed.calls, resumed.first_index)
    elif retrying is not None:
        # The failed attempt's prompt, answers and tool results stay in the conversation: the
        # model goes on from what it did (its tool calls ran), as after a crash. An attempt
        # spends a turn of the budget all the same.
        batch = tuple(m for m in inbox.snapshot() if m.message_id in retrying.inbox_ids)
        state.meter.spent += Spending(turns=1)
    else:
        batch = inbox.snapshot()
        if deps.compactor is not None:
            await deps.compactor.before_turn(deps.conv, turn)
        prompt = turn_prompt(state, batch)
        # A turn whose first call would pass a cap does not start: its inbox stays undelivered.
        refused = runner.refused_call({"role": "user", "content": prompt})
        if refused is not None:
            return Finish(StopReason.COMPLETED if state.finishing else refused)
        state.meter.spent += Spending(turns=1)
        deps.conv.begin_turn(prompt, turn, tuple(m.message_id for m in batch))
    await deps.observer.emit(
        TurnStarted(turn, state.failed_attempts + 1), inbox=len(batch), resumed=resumed is not None
    )
    outcome = await runner.run(turn, _turn_caller(batch))
    attempt = Attempt(turn, tuple(m.message_id for m in batch), state.next_prompt)
    seen = await _look_around(deps, cell.state, outcome, attempt)
    after = next_step(cell.state, outcome, attempt, seen, deps.opts)
    cell.state = after.state
    if after.clamped_from is not None:
        assert isinstance(after.step, Wait)
        requested, wake_at = after.clamped_from, after.step.schedule.wake_at
        deps.observer.log.warning(
            "wake_clamped", requested=requested.isoformat(), wake_at=wake_at.isoformat()
        )
    if after.deliver:
        deps.controls.inbox.delivered(batch)
        deps.conv.record(InboxDelivered(attempt.inbox_ids, turn))
    failure = type(outcome.error).__name__ if outcome.failed else None
    await deps.observer.emit(TurnFinished(turn, outcome.spent.model_calls, failure))
    if after.checkpoint:
        wake = after.step.schedule.wake_at if isinstance(after.step, Wait) else None
        await deps.checkpoint(None, next_wake_at=wake)
    return after.step


async def _look_around(
    deps: LoopDeps, state: RunState, outcome: TurnOutcome, attempt: Attempt
) -> Seen:
    """What :func:`next_step` needs to know beyond the outcome: for a failed attempt, the
    retry policy's answer (the call it cut short answered first); for a completing one,
    whether inbox messages the model has not seen wait."""
    seen = Seen(now=deps.opts.clock.now(), elapsed=deps.elapsed())
    if outcome.failed:
        assert outcome.error is not None
        # What the attempt did stays in the conversation (a call cut short is answered as
        # interrupted: it may or may not have taken effect), so that a retry, or the next
        # turn, never hides from the model a tool call that ran.
        deps.conv.answer_open_calls(INTERRUPTED, attempt.turn)
        tries = state.failed_attempts + 1
        decision = _retry_decision(deps, outcome.error, tries)
        deps.observer.log.warning(
            "turn_failed",
            turn=attempt.turn,
            error=type(outcome.error).__name__,
            attempt=tries,
            decision=decision.value,
        )
        delay = 0.0
        if decision is RetryDecision.RETRY_TURN:
            delay = _retry_delay(deps, outcome.error, tries)
        seen = attrs.evolve(seen, decision=decision, delay=delay)
    if ends_completed(state, outcome, seen, deps.opts):
        await deps.poll_inbox()
        carried = set(attempt.inbox_ids)
        waiting = any(m.message_id not in carried for m in deps.controls.inbox.snapshot())
        seen = attrs.evolve(seen, waiting=waiting, elapsed=deps.elapsed())
    return seen


def _retry_decision(deps: LoopDeps, error: BaseException, attempt: int) -> RetryDecision:
    policy = deps.opts.retry_policy
    if policy is None:
        return RetryDecision.ABORT_RUN
    try:
        decision = policy(error, attempt)
    except Exception as exc:
        deps.observer.log.warning("retry_policy_failed", error=type(exc).__name__)
        return RetryDecision.ABORT_RUN
    return decision if isinstance(decision, RetryDecision) else RetryDecision.ABORT_RUN


def _retry_delay(deps: LoopDeps, error: BaseException, attempt: int) -> float:
    """The seconds a retry policy with a ``delay(error, attempt)`` method asks to wait before
    the retry; 0 for a plain policy, or a delay that fails or is not a number."""
    delay = deps.opts.retry_policy.delay if deps.opts.retry_policy is not None else None
    if not callable(delay):
        return 0.0
    try:
        seconds = float(delay(error, attempt))
    except Exception as exc:
        deps.observer.log.warning("retry_delay_failed", error=type(exc).__name__)
        return 0.0
    return seconds if math.isfinite(seconds) and seconds > 0 else 0.0


async def _back_off(deps: LoopDeps, seconds: float) -> None:
    """Wait before a retry, on the run's clock: a stop cancels the wait, and it ends when the
    wall-clock budget does (the budget check that follows ends the run)."""
    if deps.opts.max_wallclock:
        seconds = min(seconds, max(deps.opts.max_wallclock - deps.elapsed(), 0.0))
    deps.observer.log.info("retry_backoff", seconds=round(seconds, 3))
    clock = deps.opts.clock
    await clock.sleep_until(clock.now() + timedelta(seconds=seconds))


async def _wait(deps: LoopDeps, cell: StateCell, step: Wait) -> RunResult | None:
    """Hand a schedule to the scheduler: None when the run goes on, else the exit's result."""
    assert deps.opts.scheduler is not None and deps.controls.wake is not None
    event = step.schedule  # clamped to max_defer already, before its checkpoint
    cell.evolve(next_wake_at=event.wake_at)
    await deps.observer.emit(Sleeping(event.turn, event.wake_at))
    deps.controls.set_idle(True)
    try:
        outcome = await deps.opts.scheduler.wait(event, deps.controls.wake)
    except Defer:
        outcome = Defer()
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:
        if _retry_decision(deps, exc, 1) is RetryDecision.ABORT_RUN:
            return await deps.exit(StopReason.RETRY_POLICY_ABORTED, exc)
        outcome = None
    finally:
        deps.controls.set_idle(False)
    if isinstance(outcome, Defer):
        return await deps.exit(StopReason.DEFERRED)
    cell.evolve(next_wake_at=None)
    await deps.observer.emit(Woke(event.turn))
    return None


def _turn_caller(batch: tuple[InboxMessage, ...]) -> Caller | None:
    """The turn's originator: the newest inbox message that names its caller."""
    for message in reversed(batch):
        if message.caller is not None:
            return to_caller(message.caller)
    return None
