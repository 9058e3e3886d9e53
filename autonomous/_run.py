"""The driver loop of one run: budgets, hooks, pause, inbox, turns, checkpoints, exits."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import datetime
from typing import Any

import anyio
import attrs
import structlog

from eventlog import (
    Checkpoint,
    Control,
    Event,
    InboxDelivered,
    InboxQueued,
    MemoryEventLog,
    Originator,
    SessionKey,
    SessionRef,
    new_event_id,
)
from permissions import Caller
from scheduler import Defer, ScheduleEvent
from usage import Pricing

from ._agent import Agent
from ._control import ControlTools
from ._conversation import Conversation
from ._decide import (
    Continue,
    Finish,
    Retry,
    Step,
    Totals,
    Wait,
    after_turn,
    clamp_wake,
    status_for,
    turn_budget,
)
from ._errors import BuildError, ConfigurationError, RunFinished, TurnError, TurnTimeout
from ._flag import Flag
from ._inbox import Inbox, InboxMessage, Wake, inbox_block
from ._options import RunOptions
from ._progress import (
    CheckpointWritten,
    Paused,
    ProgressHub,
    Resumed,
    RunExited,
    TurnFinished,
    TurnStarted,
    Woke,
)
from ._result import AutonomousStatus, RetryDecision, RunResult, StopReason
from ._turn import BudgetReached, Tally, TurnRunner

_FINAL_WRITE_TIMEOUT = 5.0
_log = structlog.get_logger("autonomous")
_AUTHOR = "autonomous"


class Run:
    """One run of the loop, shared by the entry points and the handle."""

    __slots__ = (
        "_control",
        "_final_written",
        "_phase",
        "_scope",
        "_started",
        "_turn_error",
        "_unpause",
        "_wake",
        "build",
        "conv",
        "done",
        "done_detail",
        "failed_attempts",
        "failure",
        "goal",
        "hub",
        "inbox",
        "key",
        "log",
        "next_prompt",
        "next_wake_at",
        "opts",
        "outcome",
        "outcome_result",
        "parked",
        "paused",
        "ready",
        "result",
        "resume_ref",
        "status",
        "stop_requested",
        "tally",
    )

    def __init__(
        self,
        build: Callable[..., Any],
        goal: str,
        opts: RunOptions,
        *,
        resume: SessionRef | None = None,
    ) -> None:
        self.build = build
        self.goal = goal
        self.opts = opts
        self.resume_ref = resume
        self.hub = ProgressHub(opts.progress)
        self.inbox = Inbox()
        self.ready = Flag()
        self.done = Flag()
        self.status = AutonomousStatus.RUNNING
        self.result: RunResult | None = None
        self.failure: BaseException | None = None
        self.stop_requested = False
        self.paused = False
        self.parked = False
        # Made on first use: an idle Event costs more memory than the rest of a small run.
        self._phase: anyio.Event | None = None
        self._unpause: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._wake: Wake | None = None
        self._final_written = False
        self.key: SessionKey | None = None
        self.conv: Conversation | None = None
        self.tally = Tally(Totals())
        self.next_prompt = goal
        self.next_wake_at: datetime | None = None
        self.done_detail = ""
        self.outcome: str | None = None
        self.outcome_result: Any = None
        self.failed_attempts = 0
        self._started = 0.0
        self.log: Any = _log
        self._control: ControlTools | None = None
        self._turn_error: BaseException | None = None

    # ---- lifecycle -------------------------------------------------------------------

    async def execute(self) -> RunResult:
        """Run to the end; returns the result, raises a build failure, re-raises cancellation."""
        self._started = self.opts.clock.monotonic()
        self._wake = Wake(self.inbox)
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self.stop_requested:
                    scope.cancel()
                result = await self._main()
            if scope.cancelled_caught or self.result is None:
                result = await self._exit(StopReason.CONTEXT_CANCELLED)
            return result
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(_FINAL_WRITE_TIMEOUT):
                await self._exit(StopReason.CONTEXT_CANCELLED)
            raise
        except BaseException as exc:
            self.failure = exc
            self.status = AutonomousStatus.FAILED
            raise
        finally:
            self.hub.close()
            self.ready.set()
            self.done.set()
            self._notify()

    async def _main(self) -> RunResult:
        agent = await self._build()
        self._open(agent)
        self.ready.set()
        return await self._loop(agent)

    async def _build(self) -> Agent:
        extra = self.control_tools().tools()
        try:
            if self.resume_ref is not None:
                made = self.build(extra, self.resume_ref.session_id)
            else:
                made = self.build(extra)
            if inspect.isawaitable(made):
                made = await made
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            raise BuildError(f"build failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(made, Agent):
            raise BuildError(f"build must return an Agent, got {made!r}")
        ref = self.resume_ref
        if ref is not None and made.session is not None and made.session.key != ref.key:
            raise BuildError(
                f"the built agent's session {made.session.key} is not the resumed "
                f"session {ref.key}: build must adopt session_id"
            )
        return made

    def control_tools(self) -> ControlTools:
        """The run's done and schedule tools (built once)."""
        if self._control is None:
            o = self.opts
            self._control = ControlTools(
                done_name=o.done_tool_name,
                schedule_name=o.schedule_tool_name if o.scheduler is not None else None,
                outcomes=o.outcomes,
                result_schema=o.result_schema,
                schedule_max_defer=o.schedule_tool_max_defer,
                clock=o.clock,
                done_text=o.done_tool_description,
                schedule_text=o.schedule_tool_description,
            )
        return self._control

    def _open(self, agent: Agent) -> None:
        ref = agent.session or self.resume_ref
        if ref is None:
            ref = SessionRef(MemoryEventLog(), "autonomous", "local", new_event_id())
        self.key = ref.key
        self.conv = Conversation(ref.log, ref.key, agent.system_prompt(), _AUTHOR)
        self.log = self.log.bind(session=str(ref.key), agent=agent.name)
        if self.opts.done_tool_name not in {t.name for t in agent.tools}:
            self.log.warning("done_tool_missing", tool=self.opts.done_tool_name)

    async def _pricing(self, agent: Agent) -> Pricing:
        if self.opts.pricing is not None:
            return self.opts.pricing
        from ._litellm import LiteLLMModel

        if isinstance(agent.model, LiteLLMModel):
            try:  # in a thread: the first use imports litellm (seconds), the loop must go on
                return await anyio.to_thread.run_sync(Pricing.for_model, agent.model.name)
            except LookupError:
                pass
        if self.opts.max_cost_usd:
            self.log.warning("cost_cap_without_pricing", max_cost_usd=self.opts.max_cost_usd)
        return Pricing()

    def elapsed(self) -> float:
        """Seconds since this process started the run."""
        return self.opts.clock.monotonic() - self._started

    # ---- the loop --------------------------------------------------------------------

    async def _loop(self, agent: Agent) -> RunResult:
        assert self.conv is not None
        control = self.control_tools()
        tools = {t.name: t for t in agent.tools}
        runner = TurnRunner(
            model=agent.model,
            tools=tools,
            specs=[t.spec() for t in agent.tools],
            control=control,
            conv=self.conv,
            opts=self.opts,
            pricing=await self._pricing(agent),
            tracker=self.opts.tracker,
            hub=self.hub,
            gate=self.opts.permissions_gate,
            tally=self.tally,
            elapsed=self.elapsed,
            log=self.log,
        )
        self.log.info("run_started", max_turns=self.opts.max_turns)
        while True:
            reason = turn_budget(self.opts, self.tally.totals, self.elapsed())
            if reason is not None:
                return await self._exit(reason)
            await anyio.lowlevel.checkpoint()
            turn = self.tally.totals.turns + 1
            hook_error = await self._before_turn(turn)
            if hook_error is not None:
                return await self._exit(StopReason.RETRY_POLICY_ABORTED, hook_error)
            step = await self._turn(runner, turn)
            if isinstance(step, Finish):
                return await self._exit(step.reason, self._turn_error)
            if isinstance(step, Wait):
                finished = await self._wait(step)
                if finished is not None:
                    return finished

    async def _before_turn(self, turn: int) -> BaseException | None:
        if self.opts.before_turn is not None:
            try:
                await self.opts.before_turn(turn)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                self.log.warning("before_turn_failed", turn=turn, error=type(exc).__name__)
                return exc
        await self._park(turn)
        return None

    async def _turn(self, runner: TurnRunner, turn: int) -> Step:
        assert self.conv is not None
        control = self.control_tools()
        control.reset()
        self._turn_error = None
        batch = self.inbox.snapshot()
        caller = _turn_caller(batch)
        base_prompt = self.next_prompt
        self.tally.totals = self.tally.totals.add_turn()
        self.conv.begin_turn(inbox_block(batch, base_prompt), turn)
        self.log.info("turn_started", turn=turn, inbox=len(batch))
        if self.hub.active:
            await self.hub.emit(turn, TurnStarted(turn, self.failed_attempts + 1))
        budget: StopReason | None = None
        error: BaseException | None = None
        calls_before = self.tally.totals.model_calls
        try:
            limit = self.opts.per_turn_timeout
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
        except Exception as exc:
            error = exc
        attempt = _Attempt(turn, batch, base_prompt, calls_before)
        return await self._settle(attempt, budget, error)

    async def _settle(
        self, attempt: _Attempt, budget: StopReason | None, error: BaseException | None
    ) -> Step:
        assert self.conv is not None
        turn, batch, base_prompt = attempt.turn, attempt.batch, attempt.base_prompt
        control = self.control_tools()
        done, schedule = control.done, control.schedule
        decision: RetryDecision | None = None
        if error is not None and done is None:
            self.failed_attempts += 1
            self._turn_error = error
            self.conv.abandon_turn()
            decision = self._retry_decision(error, self.failed_attempts)
            self.log.warning(
                "turn_failed",
                turn=turn,
                error=type(error).__name__,
                attempt=self.failed_attempts,
                decision=decision.value,
            )
        step = after_turn(
            error=error if done is None else None,
            decision=decision,
            done=done,
            schedule=schedule,
            continuation_prompt=self.opts.continuation_prompt,
        )
        if budget is not None and done is None:
            step = Finish(budget)
        succeeded = error is None or done is not None
        if succeeded:
            self.failed_attempts = 0
            if batch:
                self.inbox.delivered(batch)
                self.conv.record(InboxDelivered(tuple(m.message_id for m in batch), turn))
        if done is not None:
            self.done_detail, self.outcome, self.outcome_result = (
                done.detail,
                done.outcome,
                done.result,
            )
        if isinstance(step, Retry):
            self.next_prompt = base_prompt
        elif isinstance(step, Continue | Wait):
            self.next_prompt = step.prompt
        self.log.info("turn_finished", turn=turn, ok=succeeded)
        if self.hub.active:
            await self.hub.emit(
                turn,
                TurnFinished(
                    turn,
                    self.tally.totals.model_calls - attempt.calls_before,
                    None if succeeded else type(error).__name__,
                ),
            )
        if not isinstance(step, Finish):
            wake = step.schedule.wake_at if isinstance(step, Wait) else None
            await self._checkpoint(None, turn_failed=not succeeded, next_wake_at=wake)
        return step

    def _retry_decision(self, error: BaseException, attempt: int) -> RetryDecision:
        policy = self.opts.retry_policy
        if policy is None:
            return RetryDecision.ABORT_RUN
        try:
            decision = policy(error, attempt)
        except Exception as exc:
            self.log.warning("retry_policy_failed", error=type(exc).__name__)
            return RetryDecision.ABORT_RUN
        return decision if isinstance(decision, RetryDecision) else RetryDecision.ABORT_RUN

    async def _wait(self, step: Wait) -> RunResult | None:
        assert self.opts.scheduler is not None and self._wake is not None
        now = self.opts.clock.now()
        wake_at, clamped = clamp_wake(step.schedule.wake_at, now, self.opts.max_defer)
        if clamped:
            self.log.warning(
                "wake_clamped",
                requested=step.schedule.wake_at.isoformat(),
                wake_at=wake_at.isoformat(),
            )
        event = ScheduleEvent(
            wake_at, step.schedule.next_prompt, step.schedule.detail, step.schedule.turn
        )
        self.next_wake_at = wake_at
        self._set_idle(True)
        try:
            outcome = await self.opts.scheduler.wait(event, self._wake)
        except Defer:
            outcome = Defer()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            decision = self._retry_decision(exc, 1)
            if decision is RetryDecision.ABORT_RUN:
                self._turn_error = exc
                return await self._exit(StopReason.RETRY_POLICY_ABORTED, exc)
            outcome = None
        finally:
            self._set_idle(False)
        if isinstance(outcome, Defer):
            return await self._exit(StopReason.DEFERRED)
        self.next_wake_at = None
        if self.hub.active:
            await self.hub.emit(step.schedule.turn, Woke(step.schedule.turn))
        return None

    # ---- pause -----------------------------------------------------------------------

    def _notify(self) -> None:
        event, self._phase = self._phase, None
        if event is not None:
            event.set()

    def _set_idle(self, idle: bool) -> None:
        self.parked = idle
        if idle and self.paused:
            self.status = AutonomousStatus.PAUSED
        self._notify()

    async def _park(self, turn: int) -> None:
        if not self.paused:
            return
        self.parked = True
        self.status = AutonomousStatus.PAUSED
        self._notify()
        self.log.info("paused", turn=turn)
        if self.hub.active:
            await self.hub.emit(turn, Paused(turn))
        try:
            while self.paused:
                if self._unpause is None:
                    self._unpause = anyio.Event()
                await self._unpause.wait()
        finally:
            self.parked = False
            self._notify()
        self.log.info("resumed", turn=turn)
        if self.hub.active:
            await self.hub.emit(turn, Resumed(turn))

    async def request_pause(self, caller: Originator | None = None) -> None:
        """Ask the loop to park at the next turn boundary; returns once it has (or ended)."""
        self._check_live("pause")
        if not self.paused:
            self.paused = True
            self._unpause = anyio.Event()
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
        if self.paused:
            self.paused = False
            self.status = AutonomousStatus.RUNNING
            if self._unpause is not None:
                self._unpause.set()
            await self._control_note("resume", caller)
            self._notify()

    async def request_stop(self) -> None:
        """Cancel the run and return once it has unwound; idempotent."""
        if not self.stop_requested and not self.done.is_set():
            self.stop_requested = True
            self.status = AutonomousStatus.STOPPED
            if self._scope is not None:
                self._scope.cancel()
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
        message = InboxMessage(new_event_id(), text, caller)
        payload = InboxQueued(message.message_id, text, caller)
        await self.conv.log.append([Event.create(self.key, payload, author=_author(caller))])
        self.inbox.add(message)
        self.request_wake()

    def _check_live(self, what: str) -> None:
        if self.done.is_set() or self.result is not None:
            raise RunFinished(f"cannot {what}: the run has ended ({self.status})")

    async def _control_note(self, action: str, caller: Originator | None) -> None:
        if self.conv is None or self.key is None:
            return
        event = Event.create(self.key, Control(action, caller), author=_author(caller))
        await self.conv.log.append([event])

    # ---- exits and checkpoints -------------------------------------------------------

    async def _checkpoint(
        self,
        stop_reason: StopReason | None,
        *,
        turn_failed: bool = False,
        next_wake_at: datetime | None = None,
    ) -> None:
        assert self.conv is not None
        t = self.tally.totals
        self.conv.record(
            Checkpoint(
                turns=t.turns,
                input_tokens=t.input_tokens,
                output_tokens=t.output_tokens,
                cost_usd=t.cost_usd,
                next_prompt=self.next_prompt,
                stop_reason=stop_reason.value if stop_reason is not None else None,
                next_wake_at=next_wake_at,
                done_detail=self.done_detail,
                final_text=self.tally.final_text,
                outcome=self.outcome,
                result=self.outcome_result,
                model_calls=t.model_calls,
                turn_failed=turn_failed,
                failed_attempts=self.failed_attempts,
            )
        )
        await self.conv.flush()
        if self.hub.active:
            await self.hub.emit(
                t.turns, CheckpointWritten(t.turns, stop_reason.value if stop_reason else None)
            )

    async def _exit(self, reason: StopReason, error: BaseException | None = None) -> RunResult:
        if self.result is not None:
            return self.result
        wake = self.next_wake_at if reason is StopReason.DEFERRED else None
        t = self.tally.totals
        result = RunResult(
            reason=reason,
            final_text=self.tally.final_text,
            turns=t.turns,
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            cost_usd=t.cost_usd,
            duration=self.elapsed(),
            done_detail=self.done_detail,
            next_wake_at=wake,
            error=error if reason is StopReason.RETRY_POLICY_ABORTED else None,
            outcome=self.outcome,
            result=self.outcome_result,
            session_id=self.key.session_id if self.key is not None else "",
        )
        self.result = result
        if self.conv is not None and not self._final_written:
            self._final_written = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(_FINAL_WRITE_TIMEOUT):
                await self._checkpoint(reason, next_wake_at=wake)
        self.status = AutonomousStatus(status_for(reason, self.stop_requested))
        self.log.info(
            "run_finished",
            reason=reason.value,
            turns=t.turns,
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            cost_usd=t.cost_usd,
        )
        if self.hub.active:
            await self.hub.emit(t.turns, RunExited(t.turns, reason.value))
        return result


@attrs.frozen
class _Attempt:
    turn: int
    batch: tuple[InboxMessage, ...]
    base_prompt: str
    calls_before: int


def _turn_caller(batch: tuple[InboxMessage, ...]) -> Caller | None:
    for message in reversed(batch):
        if message.caller is not None:
            c = message.caller
            return Caller(identity=c.identity, labels=dict(c.labels), admin=c.admin)
    return None


def _author(caller: Originator | None) -> str:
    return f"inject:{caller.identity}" if caller is not None and caller.identity else "inject"
