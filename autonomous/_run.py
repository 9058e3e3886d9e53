"""One run: its lifecycle (build, session, lease, resume), its exits and its checkpoints."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import anyio
import attrs
import structlog

from eventlog import (
    Checkpoint,
    Event,
    EventLogError,
    InboxDelivered,
    LeaseLost,
    MemoryEventLog,
    SessionKey,
    SessionRef,
    new_event_id,
)
from usage import Pricing

from ._agent import Agent
from ._control_requests import Latch, RunControls
from ._conversation import Conversation
from ._decide import Totals, status_for
from ._durable import SessionKeeper, apply_restored, describe, wait_for_wake
from ._errors import BuildError, ConfigurationError
from ._exit_tools import ControlTools
from ._inbox import Inbox, Wake
from ._loop import run_loop
from ._models._litellm import LiteLLMModel
from ._options import RunOptions
from ._progress import CheckpointWritten, ProgressHub, RunExited, Woke
from ._restore import INTERRUPTED, Unfinished, restore, undelivered
from ._result import AutonomousStatus, RunResult, StopReason
from ._session_state import session_state
from ._supervisor import RecentEvents
from ._telemetry import Telemetry
from ._turn import Tally

_FINAL_WRITE_TIMEOUT = 5.0
#: The prices of a model nobody priced: all zero (frozen, so runs share it).
_NO_PRICING = Pricing()
_log = structlog.get_logger("autonomous")
_AUTHOR = "autonomous"


class Run(RunControls):
    """One run of the loop, shared by the entry points and the handle."""

    __slots__ = (
        "_control",
        "_final_written",
        "_keeper",
        "_started",
        "_turn_error",
        "abort_reason",
        "build",
        "done_detail",
        "failed_attempts",
        "finishing",
        "force",
        "goal",
        "last_turn_failed",
        "next_prompt",
        "next_wake_at",
        "opts",
        "outcome",
        "outcome_result",
        "recent",
        "resume_ref",
        "resumed_turn",
        "steer",
        "tally",
        "telemetry",
    )  # fmt: skip

    def __init__(
        self,
        build: Callable[..., Any],
        goal: str,
        opts: RunOptions,
        *,
        resume: SessionRef | None = None,
        force: bool = False,
    ) -> None:
        self.build = build
        self.force = force
        #: The turn a crash left unfinished, which the first turn of a resumed run goes on with.
        self.resumed_turn: Unfinished | None = None
        #: The done tool was called while inbox messages waited: one more turn delivers them.
        self.finishing = False
        #: The last turn failed and was cut from the conversation (its checkpoint says so).
        self.last_turn_failed = False
        self.goal = goal
        self.opts = opts
        self.resume_ref = resume
        self.recent = RecentEvents() if opts.supervisor is not None else None
        self.hub = ProgressHub(
            opts.progress, recorder=self.recent.record if self.recent is not None else None
        )
        self.steer = ""
        self.abort_reason = ""
        self.telemetry: Telemetry = opts.telemetry or _auto_telemetry()
        self.inbox = Inbox()
        self.ready = Latch()
        self.done = Latch()
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
        self._keeper: SessionKeeper | None = None
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

    @property
    def wake_signal(self) -> Wake:
        """The run's wake signal (exists once the run started)."""
        assert self._wake is not None
        return self._wake

    # ---- lifecycle -------------------------------------------------------------------

    async def execute(self) -> RunResult:
        """Run to the end; returns the result, raises a start-up failure, re-raises
        cancellation (after the final checkpoint)."""
        self._started = self.opts.clock.monotonic()
        self._wake = Wake(self.inbox)
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self.stop_requested:
                    scope.cancel()
                try:
                    agent = await self._start()
                    if agent is not None:
                        with self.telemetry.run_span(str(self.key), agent.name):
                            await self._drive(agent)
                except LeaseLost:  # an append the store refused: another holder has the session
                    self._fenced_out()
            if self.result is None:
                lost = self._keeper is not None and self._keeper.lost
                await self._exit(StopReason.LEASE_LOST if lost else StopReason.CONTEXT_CANCELLED)
            assert self.result is not None
            return self.result
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(_FINAL_WRITE_TIMEOUT, shield=True):
                await self._exit(StopReason.CONTEXT_CANCELLED)
            raise
        except BaseException as exc:
            self.failure = exc
            self.status = AutonomousStatus.FAILED
            raise
        finally:
            if self._keeper is not None:
                await self._keeper.release()
            self.hub.close()
            self.ready.set()
            self.done.set()
            self._notify()

    async def _start(self) -> Agent | None:
        """Build the agent and open (or resume) its session, then mark the run ready.

        None when the resumed session had already completed: its stored result is the run's.
        """
        ref = self.resume_ref
        if ref is not None:
            if ref.log.durable:
                await self._hold(ref)
            if await self._finished_already(ref) is not None:
                return None
        agent = await self._build()
        self._open(agent)
        assert self.conv is not None and self.key is not None
        self.conv.goal = self.goal
        if ref is None and agent.session is not None:
            await self._refuse_existing(agent.session)
        if self._keeper is None and self.conv.log.durable:
            await self._hold(SessionRef(self.conv.log, *_parts(self.key)))
        if self._keeper is not None:
            self.conv.lease = self._keeper.lease  # every append of the run is fenced by it
        if ref is not None:
            restored = await restore(self.conv.log, self.key, history_turns=self.opts.history_turns)
            apply_restored(self, restored)
            self.conv.goal = self.goal
            self.log.info("run_resumed", **describe(restored))
            await self._close_complete_turn()
            if self._keeper is not None:
                await self._keeper.start_watching_after(restored.last_seq)
        elif self._keeper is not None:
            await self._keeper.start_watching_after()
        self.ready.set()
        return agent

    def _drive(self, agent: Agent) -> Awaitable[RunResult]:
        """The loop, inside the keeper's tasks and after a resumed wait when there are any.

        Otherwise the loop's own coroutine, which execute awaits directly: every live run
        holds one coroutine frame fewer.
        """
        if self._keeper is None and self.next_wake_at is None:
            return run_loop(self, agent)
        return self._run_with_keeper(agent)

    async def _run_with_keeper(self, agent: Agent) -> RunResult:
        if self._keeper is None:
            return await self._run_loop(agent)
        failure: BaseException | None = None
        async with anyio.create_task_group() as tg:
            self._keeper.start(tg)
            try:
                result = await self._run_loop(agent)
            except Exception as exc:  # re-raised below as itself, not as an exception group
                failure = exc
            finally:
                tg.cancel_scope.cancel()  # the keeper's tasks end with the loop
        if failure is not None:
            raise failure
        return result

    async def _run_loop(self, agent: Agent) -> RunResult:
        if self.next_wake_at is not None:  # a resumed, deferred session: wait for its time
            self._set_idle(True)
            try:
                await wait_for_wake(self, self.next_wake_at)
            finally:
                self._set_idle(False)
            self.next_wake_at = None
            if self.hub.active:
                turns = self.tally.totals.turns
                await self.hub.emit(turns, Woke(turns))
        return await run_loop(self, agent)

    async def _hold(self, ref: SessionRef) -> None:
        self._keeper = SessionKeeper(self, ref.log, ref.key, self.opts)
        await self._keeper.acquire()

    async def _finished_already(self, ref: SessionRef) -> RunResult | None:
        """The stored result of a session that completed, or that was stopped on purpose
        and is not resumed with ``force``; None when the session is to run."""
        state = await session_state(ref.log, ref.key)
        if state.completed:
            reason, self.status = StopReason.COMPLETED, AutonomousStatus.COMPLETED
        elif state.stopped and not self.force:
            reason, self.status = StopReason.CONTEXT_CANCELLED, AutonomousStatus.STOPPED
            self.log.info("resume_refused_stopped", session=str(ref.key))
        else:
            return None
        cp = state.checkpoint or Checkpoint(0, 0, 0, 0.0, "")
        self.key = ref.key
        self.result = RunResult(
            reason=reason,
            final_text=cp.final_text,
            turns=cp.turns,
            input_tokens=cp.input_tokens,
            output_tokens=cp.output_tokens,
            cost_usd=cp.cost_usd,
            done_detail=cp.done_detail,
            outcome=cp.outcome,
            result=cp.result,
            session_id=ref.session_id,
        )
        if state.checkpoint is not None:  # messages acknowledged after it stay reported
            waiting = await undelivered(ref.log, ref.key, state.checkpoint, state.checkpoint_seq)
            self.result = attrs.evolve(self.result, undelivered=waiting)
        if reason is StopReason.CONTEXT_CANCELLED and not cp.stopped:
            # Make the stop part of the session's state, so a daemon no longer finds it due.
            stopped = attrs.evolve(cp, stop_reason=reason.value, stopped=True)
            await self._append_last(ref, [Event.create(ref.key, stopped, author=_AUTHOR)])
        return self.result

    async def _append_last(self, ref: SessionRef, events: list[Event]) -> None:
        if self._keeper is not None:
            await self._keeper.append_last(events)
        else:
            await ref.log.append(events)

    async def _refuse_existing(self, ref: SessionRef) -> None:
        """A fresh run must not start a session that has checkpoints: its totals would start
        from zero and the session's checkpoints go backwards."""
        if await ref.log.latest_checkpoint(ref.key) is not None:
            raise ConfigurationError(
                f"session {ref.key} already has checkpoints: continue it with "
                "resume_autonomous(build, ref, ...), or start a new session_id"
            )

    async def _close_complete_turn(self) -> None:
        """Close a resumed turn whose last answer is in the log but not its checkpoint."""
        unfinished = self.resumed_turn
        if unfinished is None or not unfinished.complete:
            return
        assert self.conv is not None
        self.resumed_turn = None
        batch = tuple(m for m in self.inbox.snapshot() if m.message_id in unfinished.inbox_ids)
        if batch:
            self.inbox.delivered(batch)
            self.conv.record(InboxDelivered(tuple(m.message_id for m in batch), unfinished.turn))
        self.next_prompt = self.opts.continuation_prompt
        await self._checkpoint(None)

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
        self.key = key = ref.key
        self.conv = Conversation(
            ref.log, key, agent.system_prompt(), _AUTHOR, window=self.opts.history_turns
        )
        self.log = self.log.bind(session=str(key), agent=agent.name)
        if self.opts.done_tool_name not in {t.name for t in agent.tools}:
            self.log.warning("done_tool_missing", tool=self.opts.done_tool_name)

    async def _pricing(self, agent: Agent) -> Pricing:
        if self.opts.pricing is not None:
            return self.opts.pricing
        if isinstance(agent.model, LiteLLMModel):
            try:  # in a thread: the first use imports litellm (seconds), the loop must go on
                return await anyio.to_thread.run_sync(Pricing.for_model, agent.model.name)
            except LookupError:
                pass
        if self.opts.max_cost_usd:
            self.log.warning("cost_cap_without_pricing", max_cost_usd=self.opts.max_cost_usd)
        return _NO_PRICING

    async def poll_inbox(self) -> None:
        """Read the inbox and control events other processes appended since the log watch
        last looked: a run about to end learns of every message acknowledged so far."""
        keeper = self._keeper
        if keeper is None or keeper.lost or keeper.lease is None:
            return
        with anyio.move_on_after(_FINAL_WRITE_TIMEOUT, shield=True):
            try:
                await keeper.poll()
            except EventLogError as exc:  # the checkpoint's horizon still covers them
                self.log.warning("inbox_poll_failed", error=type(exc).__name__)

    def elapsed(self) -> float:
        """Seconds since this process started the run."""
        return self.opts.clock.monotonic() - self._started

    def _fenced_out(self) -> None:
        """The store refused one of our appends: the session is another holder's now."""
        if self._keeper is not None:
            self._keeper.lost = True
        self.lease_lost()

    def lease_lost(self) -> None:
        """Another process took the session over: stop now and write nothing more."""
        self.log.warning("lease_lost")
        if self.conv is not None:
            self.conv.discard_pending()
        if self._scope is not None:
            self._scope.cancel()

    # ---- exits and checkpoints -------------------------------------------------------

    async def _checkpoint(
        self,
        stop_reason: StopReason | None,
        *,
        next_wake_at: datetime | None = None,
        last: bool = False,
    ) -> None:
        """Append a checkpoint; it closes the turn before it, as failed when the last turn
        failed (a resume then leaves that turn out of the history)."""
        assert self.conv is not None
        turn_failed, self.last_turn_failed = self.last_turn_failed, False
        t = self.tally.totals
        keeper = self._keeper
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
                goal=self.goal,
                inbox_from_seq=self.inbox.oldest_seq(),
                paused=self.paused,
                stopped=self.stop_requested,
                unseen_from=keeper.seen + 1 if keeper is not None else 0,
            )
        )
        if last and self._keeper is not None:  # the lease goes with the run's last write
            await self._keeper.append_last(self.conv.take_pending())
        else:
            await self.conv.flush()
        if self.hub.active:
            reason = stop_reason.value if stop_reason else None
            await self.hub.emit(t.turns, CheckpointWritten(t.turns, reason))

    async def _exit(
        self, reason: StopReason, error: BaseException | None = None, *, why: str = ""
    ) -> RunResult:
        if self.result is not None:
            return self.result
        self.abort_reason = why or self.abort_reason
        wake = self.next_wake_at if reason is StopReason.DEFERRED else None
        t = self.tally.totals
        if not lost_already(reason):
            await self.poll_inbox()  # what came since the last poll is reported, not dropped
        pending = self.inbox.snapshot()
        self.result = RunResult(
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
            abort_reason=self.abort_reason,
            undelivered=tuple(m.text for m in pending),
        )
        self.telemetry.count_stop(reason.value)
        lost = reason is StopReason.LEASE_LOST
        if self.conv is not None and not self._final_written and not lost:
            self._final_written = True
            # A call cut short (a stop during a tool) is answered in the log, so a resume
            # sends a conversation the provider accepts. A sleep's wake time is kept: a
            # resume waits out the rest of it.
            self.conv.answer_open_calls(INTERRUPTED, t.turns)
            try:
                with anyio.move_on_after(_FINAL_WRITE_TIMEOUT, shield=True):
                    await self._checkpoint(reason, next_wake_at=self.next_wake_at, last=True)
            except LeaseLost:  # nothing of ours was written: the run ends as lease_lost
                self._fenced_out()
                reason = StopReason.LEASE_LOST
                self.result = attrs.evolve(self.result, reason=reason, error=None)
        if pending:
            self.log.warning("inbox_undelivered", messages=len(pending))
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
        return self.result


def _auto_telemetry() -> Telemetry:
    """OpenTelemetry when the API is installed and an SDK provider is configured; else off.

    With only the API installed every span would go to a no-op provider at a real cost per
    call, so the runtime stays off until a program configures a provider. A program sets one
    through ``opentelemetry.trace`` or names one in the environment (loaded by the look below),
    so while neither is the case a run neither imports nor asks anything.
    """
    if "opentelemetry.trace" not in sys.modules and _PROVIDER_VARIABLE not in os.environ:
        return _NO_TELEMETRY
    try:
        from opentelemetry import trace
    except ImportError:
        return _NO_TELEMETRY
    provider = trace.get_tracer_provider()
    if type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return _NO_TELEMETRY
    return Telemetry.create()


_NO_TELEMETRY = Telemetry.disabled()
#: opentelemetry's OTEL_PYTHON_TRACER_PROVIDER: a provider for get_tracer_provider() to load.
_PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"


def lost_already(reason: StopReason) -> bool:
    """Whether a run ending for ``reason`` may no longer read or write its session."""
    return reason is StopReason.LEASE_LOST


def _parts(key: SessionKey) -> tuple[str, str, str]:
    return key.app, key.user, key.session_id
