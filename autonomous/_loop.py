"""The turn loop of a run: budgets, hooks, pause, inbox, one turn, what follows, the wait.

Functions over the :class:`Run` that owns the state; the run owns the exits and checkpoints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import attrs

from eventlog import EventLogError, InboxDelivered
from permissions import Caller
from scheduler import Defer

from ._agent import Agent
from ._callers import to_caller
from ._decide import Continue, Finish, Retry, Step, Wait, after_turn, clamp_wake, turn_budget
from ._errors import TurnError, TurnTimeout
from ._inbox import InboxMessage, inbox_block
from ._observer import Observer
from ._progress import TurnFinished, TurnStarted, Woke
from ._result import RetryDecision, RunResult, StopReason
from ._supervisor import AbortRun, PauseRun, Steer, consult, steer_message
from ._turn import BudgetReached, TurnRunner

if TYPE_CHECKING:
    from ._run import Run


@attrs.frozen
class _Attempt:
    turn: int
    batch: tuple[InboxMessage, ...]
    base_prompt: str
    calls_before: int


async def run_loop(run: Run, agent: Agent) -> RunResult:
    assert run.conv is not None
    control = run.control_tools()
    tools = {t.name: t for t in agent.tools}
    runner = TurnRunner(
        model=agent.model,
        tools=tools,
        specs=[t.spec() for t in agent.tools],
        control=control,
        conv=run.conv,
        opts=run.opts,
        pricing=await run._pricing(agent),
        tracker=run.opts.tracker,
        gate=run.opts.permissions_gate,
        tally=run.tally,
        elapsed=run.elapsed,
        observer=Observer(log=run.log, hub=run.hub, telemetry=run.telemetry),
    )
    run.log.info("run_started", max_turns=run.opts.max_turns)
    while True:
        reason = _budget(run)
        if reason is not None:
            return await run._exit(reason)
        await anyio.lowlevel.checkpoint()
        turn = _next_turn(run)
        aborted = await _supervise(run, turn)
        if aborted is not None:
            return aborted
        hook_error = await _before_turn(run, turn)
        if hook_error is not None:
            return await run._exit(StopReason.RETRY_POLICY_ABORTED, hook_error)
        if run.paused and run.resumed_turn is None:
            await run._checkpoint(None)  # says paused, to readers of the log
        if not await run._park(turn, run.opts.pause_max):
            why = f"paused longer than pause_max={run.opts.pause_max:g} s"
            return await run._exit(StopReason.ABORTED, why=why)
        reason = _budget(run)  # time passed while parked: a cap may have been reached
        if reason is not None:
            return await run._exit(reason)
        with run.telemetry.turn_span(turn):
            run.telemetry.count_turn()
            step = await _turn(run, runner, turn)
        if isinstance(step, Finish):
            return await run._exit(step.reason, run._turn_error)
        if isinstance(step, Wait):
            finished = await _wait(run, step)
            if finished is not None:
                return finished


def _budget(run: Run) -> StopReason | None:
    """The budget that ends the run before the next turn; a run whose done tool was called
    ends ``completed`` when no budget is left for the turn that delivers its inbox."""
    reason = turn_budget(run.opts, run.tally.totals, run.elapsed())
    if reason is not None and run.finishing:
        return StopReason.COMPLETED
    if (
        reason is StopReason.MAX_TURNS_EXCEEDED
        and run.resumed_turn is not None
        and run.tally.totals.turns == run.opts.max_turns
    ):
        return None  # the unfinished turn is counted already: going on with it starts none
    return reason


def _next_turn(run: Run) -> int:
    """The number of the turn about to run (a resumed, unfinished turn keeps its own)."""
    if run.resumed_turn is not None:
        return run.resumed_turn.turn
    return run.tally.totals.turns + 1


async def _before_turn(run: Run, turn: int) -> BaseException | None:
    if run.opts.before_turn is not None:
        try:
            await run.opts.before_turn(turn)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            run.log.warning("before_turn_failed", turn=turn, error=type(exc).__name__)
            return exc
    return None


async def _supervise(run: Run, turn: int) -> RunResult | None:
    """Consult the supervisor at the turn boundary; an abort ends the run here."""
    if run.opts.supervisor is None or run.recent is None:
        return None
    snapshot = run.recent.snapshot(
        turn, caps=run.opts, spent=run.tally.totals, elapsed=run.elapsed()
    )
    decision = await consult(run.opts.supervisor, snapshot, timeout=run.opts.supervisor_timeout)
    if isinstance(decision, Steer):
        run.log.info("supervisor_steer", turn=turn)
        run.steer = steer_message(decision.message)
    elif isinstance(decision, PauseRun):
        run.log.info("supervisor_pause", turn=turn, reason=decision.reason)
        if run._set_paused(True):
            await run._control_note("pause", None, author="supervisor", detail=decision.reason)
    elif isinstance(decision, AbortRun):
        run.log.warning("supervisor_abort", turn=turn, reason=decision.reason)
        return await run._exit(StopReason.ABORTED, why=decision.reason)
    return None


async def _turn(run: Run, runner: TurnRunner, turn: int) -> Step:
    assert run.conv is not None
    control = run.control_tools()
    control.reset()
    run._turn_error = None
    base_prompt = run.next_prompt
    resumed, run.resumed_turn = run.resumed_turn, None
    if resumed is not None:  # its prompt and answers are in the conversation already
        batch = tuple(m for m in run.inbox.snapshot() if m.message_id in resumed.inbox_ids)
        runner.resume_with(turn, resumed.calls, resumed.first_index)
    else:
        batch = run.inbox.snapshot()
        run.tally.totals = run.tally.totals.add_turn()
        prompt = inbox_block(batch, base_prompt)
        ids = tuple(m.message_id for m in batch)
        run.conv.begin_turn(f"{run.steer}\n\n{prompt}" if run.steer else prompt, turn, ids)
    caller = _turn_caller(batch)
    run.log.info("turn_started", turn=turn, inbox=len(batch), resumed=resumed is not None)
    if run.hub.active:
        await run.hub.emit(turn, TurnStarted(turn, run.failed_attempts + 1))
    budget: StopReason | None = None
    error: BaseException | None = None
    calls_before = run.tally.totals.model_calls
    try:
        limit = run.opts.per_turn_timeout
        if not limit:  # no scope at all: it would cost more than a short turn
            await runner.run(turn, caller)
        else:
            with anyio.move_on_after(limit) as scope:
                await runner.run(turn, caller)
            if scope.cancelled_caught:
                error = TurnTimeout(f"turn {turn} ran past per_turn_timeout={limit:g} s")
    except BudgetReached as stop:
        budget = stop.reason
    except TurnError as exc:
        error = exc
    except EventLogError:
        raise  # the log cannot record the run: not a turn error, the run fails
    except Exception as exc:
        error = exc
    attempt = _Attempt(turn, batch, base_prompt, calls_before)
    return await _settle(run, attempt, budget, error)


async def _settle(
    run: Run, attempt: _Attempt, budget: StopReason | None, error: BaseException | None
) -> Step:
    assert run.conv is not None
    turn, batch, base_prompt = attempt.turn, attempt.batch, attempt.base_prompt
    control = run.control_tools()
    done, schedule = control.done, control.schedule
    decision: RetryDecision | None = None
    run.last_turn_failed = error is not None and done is None
    if error is not None and done is None:
        run.failed_attempts += 1
        run._turn_error = error
        run.conv.abandon_turn()
        decision = _retry_decision(run, error, run.failed_attempts)
        run.log.warning(
            "turn_failed",
            turn=turn,
            error=type(error).__name__,
            attempt=run.failed_attempts,
            decision=decision.value,
        )
    step = after_turn(
        error=error if done is None else None,
        decision=decision,
        done=done,
        schedule=schedule,
        continuation_prompt=run.opts.continuation_prompt,
    )
    if budget is not None and done is None:
        step = Finish(budget)
    step = await _deliver_before_done(run, step, batch)
    if isinstance(step, Wait):
        step = _clamped(run, step)
    succeeded = error is None or done is not None
    if succeeded:
        run.failed_attempts = 0
        run.steer = ""
        if batch:
            run.inbox.delivered(batch)
            run.conv.record(InboxDelivered(tuple(m.message_id for m in batch), turn))
    if done is not None:
        run.done_detail, run.outcome, run.outcome_result = done.detail, done.outcome, done.result
    if isinstance(step, Retry):
        run.next_prompt = base_prompt
    elif isinstance(step, Continue | Wait):
        run.next_prompt = step.prompt
    run.log.info("turn_finished", turn=turn, ok=succeeded)
    if run.hub.active:
        await run.hub.emit(
            turn,
            TurnFinished(
                turn,
                run.tally.totals.model_calls - attempt.calls_before,
                None if succeeded else type(error).__name__,
            ),
        )
    if isinstance(step, Finish) or (succeeded and _exits_next(run, step)):
        return step  # the exit's checkpoint, written next, closes this turn too
    wake = step.schedule.wake_at if isinstance(step, Wait) else None
    await run._checkpoint(None, next_wake_at=wake)
    return step


async def _deliver_before_done(run: Run, step: Step, batch: tuple[InboxMessage, ...]) -> Step:
    """Turn a completion into one more turn when inbox messages wait that the model has not
    seen and the budgets allow it: a message acknowledged before the end is never dropped.

    After that turn the run completes (the done tool was called already), whatever the turn
    did, unless more messages came and the budgets still allow another.
    """
    if run.finishing and not isinstance(step, Retry):
        step = Finish(StopReason.COMPLETED)
    if not (isinstance(step, Finish) and step.reason is StopReason.COMPLETED):
        return step
    await run.poll_inbox()
    seen = {m.message_id for m in batch}
    waiting = [m for m in run.inbox.snapshot() if m.message_id not in seen]
    if not waiting or turn_budget(run.opts, run.tally.totals, run.elapsed()) is not None:
        return step
    run.finishing = True
    done = run.opts.done_tool_name
    return Continue(
        f"New messages arrived after you called {done}. Act on them if they need it, "
        f"then call {done} again."
    )


def _clamped(run: Run, step: Wait) -> Wait:
    """``step`` with its wake time held to ``max_defer``: before the checkpoint records it."""
    now = run.opts.clock.now()
    wake_at, clamped = clamp_wake(step.schedule.wake_at, now, run.opts.max_defer)
    if not clamped:
        return step
    run.log.warning(
        "wake_clamped", requested=step.schedule.wake_at.isoformat(), wake_at=wake_at.isoformat()
    )
    return attrs.evolve(step, schedule=attrs.evolve(step.schedule, wake_at=wake_at))


def _exits_next(run: Run, step: Step) -> bool:
    """Whether the loop will exit on a budget before the next turn (a commit saved)."""
    if not isinstance(step, Continue):
        return False
    return turn_budget(run.opts, run.tally.totals, run.elapsed()) is not None


def _retry_decision(run: Run, error: BaseException, attempt: int) -> RetryDecision:
    policy = run.opts.retry_policy
    if policy is None:
        return RetryDecision.ABORT_RUN
    try:
        decision = policy(error, attempt)
    except Exception as exc:
        run.log.warning("retry_policy_failed", error=type(exc).__name__)
        return RetryDecision.ABORT_RUN
    return decision if isinstance(decision, RetryDecision) else RetryDecision.ABORT_RUN


async def _wait(run: Run, step: Wait) -> RunResult | None:
    assert run.opts.scheduler is not None
    event = step.schedule  # clamped to max_defer already, before its checkpoint
    wake_at = event.wake_at
    run.next_wake_at = wake_at
    run._set_idle(True)
    try:
        outcome = await run.opts.scheduler.wait(event, run.wake_signal)
    except Defer:
        outcome = Defer()
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:
        decision = _retry_decision(run, exc, 1)
        if decision is RetryDecision.ABORT_RUN:
            run._turn_error = exc
            return await run._exit(StopReason.RETRY_POLICY_ABORTED, exc)
        outcome = None
    finally:
        run._set_idle(False)
    if isinstance(outcome, Defer):
        return await run._exit(StopReason.DEFERRED)
    run.next_wake_at = None
    if run.hub.active:
        await run.hub.emit(step.schedule.turn, Woke(step.schedule.turn))
    return None


def _turn_caller(batch: tuple[InboxMessage, ...]) -> Caller | None:
    """The turn's originator: the newest inbox message that names its caller."""
    for message in reversed(batch):
        if message.caller is not None:
            return to_caller(message.caller)
    return None
