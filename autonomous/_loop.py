"""The turn loop of a run: budgets, hooks, pause, inbox, one turn, what follows, the wait.

Functions over the run's :class:`RunState`, handed the parts they talk to as one
:class:`LoopDeps`; the run owns the exits and checkpoints and hands them in.
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

from ._agent import Agent
from ._callers import to_caller
from ._control_requests import ControlAction, RunControls
from ._conversation import Conversation
from ._decide import Continue, Finish, Retry, Step, Wait, after_turn, clamp_wake, turn_budget
from ._exit_tools import ControlTools
from ._inbox import InboxMessage, inbox_block
from ._observer import Observer
from ._options import RunOptions
from ._restore import INTERRUPTED
from ._result import RetryDecision, RunResult, StopReason
from ._results import error_record
from ._run_state import Retrying, RunState
from ._summary import Compactor
from ._supervisor import AbortRun, PauseRun, Steer, consult, steer_message
from ._tool_table import ToolTable
from ._turn import TurnOutcome, TurnRunner


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
    """What the loop talks to (its state is the :class:`RunState` handed beside it)."""

    opts: RunOptions
    conv: Conversation
    controls: RunControls
    exit_tools: ControlTools
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


@attrs.frozen
class _Attempt:
    turn: int
    batch: tuple[InboxMessage, ...]
    base_prompt: str


async def run_loop(deps: LoopDeps, state: RunState, agent: Agent) -> RunResult:
    """Wait out a resumed session's sleep, then run turns until an exit; the result."""
    if state.next_wake_at is not None:  # a resumed, deferred session: wait for its time
        await _wait_resumed(deps, state, state.next_wake_at)
    runner = _runner(deps, state, agent)
    deps.observer.run_started(deps.opts.max_turns)
    while True:
        reason = _budget(deps, state)
        if reason is not None:
            return await deps.exit(reason)
        await anyio.lowlevel.checkpoint()
        turn = _next_turn(state)
        aborted = await _supervise(deps, state, turn)
        if aborted is not None:
            return aborted
        hook_error = await _before_turn(deps, turn)
        if hook_error is not None:
            return await deps.exit(StopReason.RETRY_POLICY_ABORTED, hook_error)
        if deps.controls.paused and state.resumed_turn is None:
            await deps.checkpoint(None)  # says paused, to readers of the log
        if not await deps.controls.park(turn, deps.opts.clock, deps.opts.pause_max):
            why = f"paused longer than pause_max={deps.opts.pause_max:g} s"
            return await deps.exit(StopReason.ABORTED, why=why)
        reason = _budget(deps, state)  # time passed while parked: a cap may have been reached
        if reason is not None:
            return await deps.exit(reason)
        with deps.observer.turn_span(turn):
            step = await _turn(deps, state, runner, turn)
        if isinstance(step, Finish):
            return await deps.exit(step.reason, step.error)
        if isinstance(step, Retry) and step.delay:
            await _back_off(deps, step.delay)
        if isinstance(step, Wait):
            finished = await _wait(deps, state, step)
            if finished is not None:
                return finished


def _runner(deps: LoopDeps, state: RunState, agent: Agent) -> TurnRunner:
    tools = agent.tools if deps.tool_table is None else deps.tool_table.tools()
    return TurnRunner(
        model=agent.model,
        tools={t.name: t for t in tools},
        specs=[t.spec() for t in tools],
        control=deps.exit_tools,
        conv=deps.conv,
        opts=deps.opts,
        pricing=deps.pricing,
        tracker=deps.opts.tracker,
        gate=deps.opts.permissions_gate,
        tally=state.tally,
        elapsed=deps.elapsed,
        observer=deps.observer,
        tool_table=deps.tool_table,
    )


async def _wait_resumed(deps: LoopDeps, state: RunState, wake_at: datetime) -> None:
    """Sleep until ``wake_at``; an inject or a wake request ends it early.

    The same wait as :class:`scheduler.SleepScheduler`'s, so a resumed deferred session and a
    sleeping one wake by the same rules.
    """
    assert deps.controls.wake is not None
    await deps.observer.sleeping(state.tally.totals.turns, wake_at)
    deps.controls.set_idle(True)
    try:
        await SleepScheduler(clock=deps.opts.clock).wait(ScheduleEvent(wake_at), deps.controls.wake)
    finally:
        deps.controls.set_idle(False)
    state.next_wake_at = None
    await deps.observer.woke(state.tally.totals.turns)


def _budget(deps: LoopDeps, state: RunState) -> StopReason | None:
    """The budget that ends the run before the next turn; a run whose done tool was called
    ends ``completed`` when no budget is left for the turn that delivers its inbox."""
    totals = state.tally.totals
    reason = turn_budget(deps.opts, totals, deps.elapsed())
    if reason is not None and state.finishing:
        return StopReason.COMPLETED
    if (
        reason is StopReason.MAX_TURNS_EXCEEDED
        and state.resumed_turn is not None
        and totals.turns == deps.opts.max_turns
    ):
        return None  # the unfinished turn is counted already: going on with it starts none
    return reason


def _next_turn(state: RunState) -> int:
    """The number of the turn about to run (a resumed, unfinished turn and a retried one keep
    their own)."""
    if state.resumed_turn is not None:
        return state.resumed_turn.turn
    if state.retrying is not None:
        return state.retrying.turn
    return state.tally.totals.turns + 1


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


async def _supervise(deps: LoopDeps, state: RunState, turn: int) -> RunResult | None:
    """Consult the supervisor at the turn boundary; an abort ends the run here."""
    opts, recent = deps.opts, deps.observer.recent
    if opts.supervisor is None or recent is None:
        return None
    snapshot = recent.snapshot(turn, caps=opts, spent=state.tally.totals, elapsed=deps.elapsed())
    decision = await consult(
        opts.supervisor, snapshot, timeout=opts.supervisor_timeout, clock=opts.clock
    )
    if isinstance(decision, Steer):
        deps.observer.log.info("supervisor_steer", turn=turn)
        state.steer = steer_message(decision.message)
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


async def _turn(deps: LoopDeps, state: RunState, runner: TurnRunner, turn: int) -> Step:
    base_prompt = state.next_prompt
    inbox = deps.controls.inbox
    resumed, state.resumed_turn = state.resumed_turn, None
    retrying, state.retrying = state.retrying, None
    if resumed is not None:  # its prompt and answers are in the conversation already
        batch = tuple(m for m in inbox.snapshot() if m.message_id in resumed.inbox_ids)
        runner.resume_with(turn, resumed.calls, resumed.first_index)
    elif retrying is not None:
        # The failed attempt's prompt, answers and tool results stay in the conversation: the
        # model goes on from what it did (its tool calls ran), as after a crash. An attempt
        # spends a turn of the budget all the same.
        batch = tuple(m for m in inbox.snapshot() if m.message_id in retrying.inbox_ids)
        state.tally.totals = state.tally.totals.add_turn()
    else:
        batch = inbox.snapshot()
        prompt = inbox_block(batch, base_prompt)
        if deps.compactor is not None:
            await deps.compactor.before_turn(deps.conv, turn)
        prompt = f"{state.steer}\n\n{prompt}" if state.steer else prompt
        # A turn whose first call would pass a cap does not start: its inbox stays undelivered.
        refused = runner.refused_call({"role": "user", "content": prompt})
        if refused is not None:
            return Finish(StopReason.COMPLETED if state.finishing else refused)
        state.tally.totals = state.tally.totals.add_turn()
        deps.conv.begin_turn(prompt, turn, tuple(m.message_id for m in batch))
    caller = _turn_caller(batch)
    await deps.observer.turn_started(
        turn, state.failed_attempts + 1, inbox=len(batch), resumed=resumed is not None
    )
    outcome = await runner.run(turn, caller)
    attempt = _Attempt(turn, batch, base_prompt)
    return await _settle(deps, state, attempt, outcome)


async def _settle(
    deps: LoopDeps,
    state: RunState,
    attempt: _Attempt,
    outcome: TurnOutcome,
) -> Step:
    """Decide what follows a turn, record it in the state, and checkpoint the turn unless
    the exit that follows writes the checkpoint."""
    done, schedule = outcome.done, outcome.schedule
    budget, error = outcome.cap, outcome.error
    failed = error is not None and done is None
    state.last_turn_failed = failed
    decision = None
    if error is not None and done is None:
        decision = _failed(deps, state, attempt.turn, error)
    step: Step = after_turn(
        error=error if done is None else None,
        decision=decision,
        done=done,
        schedule=schedule,
        continuation_prompt=deps.opts.continuation_prompt,
    )
    if budget is not None and done is None:
        step = Finish(budget)
    if isinstance(step, Retry) and error is not None:
        step = Retry(_retry_delay(deps, error, state.failed_attempts))
    step = await _deliver_before_done(deps, state, step, attempt.batch)
    if isinstance(step, Wait):
        step = _clamped(deps, step)
    if not failed:
        state.failed_attempts = 0
        state.steer = ""
        state.error = ""
    # The turn is over unless it is retried; its inbox messages reached the model unless
    # it failed and ends the run (they stay undelivered, kept for the next resume).
    if isinstance(step, Retry):
        state.retrying = Retrying(attempt.turn, tuple(m.message_id for m in attempt.batch))
    elif attempt.batch and not (failed and isinstance(step, Finish)):
        deps.controls.inbox.delivered(attempt.batch)
        ids = tuple(m.message_id for m in attempt.batch)
        deps.conv.record(InboxDelivered(ids, attempt.turn))
    if done is not None:
        state.record_done(done)
    if isinstance(step, Retry):
        state.next_prompt = attempt.base_prompt
    elif isinstance(step, Continue | Wait):
        state.next_prompt = step.prompt
    await _report_finished(deps, attempt, outcome.spent.model_calls, error if failed else None)
    if isinstance(step, Finish) or (not failed and _exits_next(deps, state, step)):
        return step  # the exit's checkpoint, written next, closes this turn too
    wake = step.schedule.wake_at if isinstance(step, Wait) else None
    await deps.checkpoint(None, next_wake_at=wake)
    return step


def _failed(deps: LoopDeps, state: RunState, turn: int, error: BaseException) -> RetryDecision:
    """Count a failed attempt, answer the tool call it cut short, and ask the retry policy.

    What the attempt did stays in the conversation (a call cut short is answered as
    interrupted: it may or may not have taken effect), so that a retry, or the next turn,
    never hides from the model a tool call that ran.
    """
    state.failed_attempts += 1
    state.error = error_record(error)
    deps.conv.answer_open_calls(INTERRUPTED, turn)
    decision = _retry_decision(deps, error, state.failed_attempts)
    deps.observer.log.warning(
        "turn_failed",
        turn=turn,
        error=type(error).__name__,
        attempt=state.failed_attempts,
        decision=decision.value,
    )
    return decision


async def _report_finished(
    deps: LoopDeps, attempt: _Attempt, calls: int, error: BaseException | None
) -> None:
    failure = None if error is None else type(error).__name__
    await deps.observer.turn_finished(attempt.turn, calls, failure)


async def _deliver_before_done(
    deps: LoopDeps, state: RunState, step: Step, batch: tuple[InboxMessage, ...]
) -> Step:
    """Turn a completion into one more turn when inbox messages wait that the model has not
    seen and the budgets allow it: a message acknowledged before the end is never dropped.

    After that turn the run completes (the done tool was called already), whatever the turn
    did, unless more messages came and the budgets still allow another.
    """
    if state.finishing and not isinstance(step, Retry):
        step = Finish(StopReason.COMPLETED)
    if not (isinstance(step, Finish) and step.reason is StopReason.COMPLETED):
        return step
    await deps.poll_inbox()
    seen = {m.message_id for m in batch}
    waiting = [m for m in deps.controls.inbox.snapshot() if m.message_id not in seen]
    if not waiting or turn_budget(deps.opts, state.tally.totals, deps.elapsed()) is not None:
        return step
    state.finishing = True
    done = deps.opts.done_tool_name
    return Continue(
        f"New messages arrived after you called {done}. Act on them if they need it, "
        f"then call {done} again."
    )


def _clamped(deps: LoopDeps, step: Wait) -> Wait:
    """``step`` with its wake time held to ``max_defer``: before the checkpoint records it."""
    now = deps.opts.clock.now()
    wake_at, clamped = clamp_wake(step.schedule.wake_at, now, deps.opts.max_defer)
    if not clamped:
        return step
    deps.observer.log.warning(
        "wake_clamped", requested=step.schedule.wake_at.isoformat(), wake_at=wake_at.isoformat()
    )
    return attrs.evolve(step, schedule=attrs.evolve(step.schedule, wake_at=wake_at))


def _exits_next(deps: LoopDeps, state: RunState, step: Step) -> bool:
    """Whether the loop will exit on a budget before the next turn (a commit saved)."""
    if not isinstance(step, Continue):
        return False
    return turn_budget(deps.opts, state.tally.totals, deps.elapsed()) is not None


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
    delay = getattr(deps.opts.retry_policy, "delay", None)
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


async def _wait(deps: LoopDeps, state: RunState, step: Wait) -> RunResult | None:
    """Hand a schedule to the scheduler: None when the run goes on, else the exit's result."""
    assert deps.opts.scheduler is not None and deps.controls.wake is not None
    event = step.schedule  # clamped to max_defer already, before its checkpoint
    state.next_wake_at = event.wake_at
    await deps.observer.sleeping(event.turn, event.wake_at)
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
    state.next_wake_at = None
    await deps.observer.woke(event.turn)
    return None


def _turn_caller(batch: tuple[InboxMessage, ...]) -> Caller | None:
    """The turn's originator: the newest inbox message that names its caller."""
    for message in reversed(batch):
        if message.caller is not None:
            return to_caller(message.caller)
    return None
