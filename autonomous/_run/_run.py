"""One run: its lifecycle (build, session, lease, resume), its exits and its checkpoints."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from datetime import datetime
from typing import Any

import anyio
import attrs
from structlog.typing import FilteringBoundLogger

from eventlog import (
    Budgets,
    Checkpoint,
    Event,
    EventKind,
    EventLog,
    EventLogError,
    InboxDelivered,
    LeaseLost,
    MemoryEventLog,
    SessionKey,
    SessionRef,
    new_event_id,
)
from usage import Pricing

from .._agent import Agent
from .._control._control_requests import RunControls
from .._control._inbox import Inbox, Wake
from .._control._session_state import SessionState, session_state
from .._durable._durable import WATCH_KINDS, AdoptedLease, SessionKeeper
from .._durable._restore import Restored, describe, restore, undelivered
from .._errors import BuildError, ConfigurationError
from .._logging import get_logger
from .._models._litellm import LiteLLMModel
from .._observe._observer import Observer
from .._observe._telemetry import auto_telemetry
from .._options import RunOptions, budgets_of, with_budgets
from .._progress import CheckpointWritten, RunExited
from .._result import RunResult, StopReason
from .._state._conversation import Conversation
from .._state._history import INTERRUPTED, Window
from .._state._run_state import Meter, RunState, StateCell
from .._tools._exit_tools import ExitTools
from .._tools._tool_result import error_record
from ._loop import LoopDeps, run_loop
from ._summary import compactor_for
from ._tool_table import ToolTable, open_tool_table

#: Seconds (on the run's clock) that the run's last calls to the store share: the inbox's last
#: read, the final checkpoint and the lease's release. A stop returns within it and a little,
#: whatever the store does; the keeper's calls in flight are bounded by it too.
_FINAL_WRITE_TIMEOUT = 5.0
#: The prices of a model nobody priced: all zero (frozen, so runs share it).
_NO_PRICING = Pricing()
_log = get_logger("autonomous")
_AUTHOR = "autonomous"


@attrs.frozen
class Session:
    """What a run works on once it has started, all of it at once: its agent, the
    conversation (its log and key), the prices its calls count with, and its tools when MCP
    servers add to the agent's own (None: the agent's).

    Built once by :meth:`Run._start` and handed to the loop and the checkpoints; a run that
    stops, fails or finds its session finished before that has none.
    """

    agent: Agent
    conv: Conversation
    pricing: Pricing
    tools: ToolTable | None

    @property
    def key(self) -> SessionKey:
        """The session's key."""
        return self.conv.key


class Run:
    """One run of the loop, shared by the entry points and the handle.

    It builds the agent, opens (or resumes) the session and holds its lease, then hands the
    loop the :class:`StateCell` that keeps its :class:`RunState` and a :class:`LoopDeps` made
    from the :class:`Session` its start built; the exits and checkpoints are its own.
    """

    def __init__(
        self,
        build: Callable[..., Any],
        goal: str,
        opts: RunOptions,
        *,
        resume: SessionRef | None = None,
        force: bool = False,
        lease: AdoptedLease | None = None,
        budgets_given: frozenset[str] = frozenset(),
    ) -> None:
        self.build = build
        self.opts = opts
        self.resume_ref = resume
        self.force = force
        self.adopted = lease  # a lease lent to the run: held, never taken nor dropped here
        #: The goal a new session starts with (a resume's is its log's: the history holds it).
        self.goal = goal
        self.cell = StateCell(RunState.fresh(goal))
        self.observer = Observer.for_run(
            progress=opts.progress,
            supervised=opts.supervisor is not None,
            telemetry=opts.telemetry or auto_telemetry(),
        )
        self.controls = RunControls(Inbox(), self.observer, self.cell)
        #: How the run ended (None while it runs): the first exit sets it, the others return it.
        self.result: RunResult | None = None
        #: The session the run works on, set once it is complete (None before: a stop or a
        #: failure during the start finds none, and writes no checkpoint).
        self.session: Session | None = None
        #: The session's lease and log watch, from the moment the run takes the lease (on a
        #: resume, before the agent is built) to its release; None: a session not leased.
        self._keeper: SessionKeeper | None = None
        o = opts
        #: The run's done and schedule tools (their options are not budgets: a resume's
        #: budgets leave them as they are).
        self.exit_tools = ExitTools(
            done_name=o.done_tool_name,
            schedule_name=o.schedule_tool_name if o.scheduler is not None else None,
            outcomes=o.outcomes,
            result_schema=o.result_schema,
            schedule_max_defer=o.schedule_tool_max_defer,
            clock=o.clock,
            done_text=o.done_tool_description,
            schedule_text=o.schedule_tool_description,
        )
        self._final_written = False
        self._last_by: float | None = None  # when the last writes' time is up (run's clock)
        self._started_at = 0.0
        self._resources = AsyncExitStack()
        #: The budgets given to a resume explicitly: they change the session's recorded ones.
        self.budgets_given = budgets_given

    @property
    def key(self) -> SessionKey | None:
        """The session's key, once the agent is built and its conversation open."""
        conv = self.controls.conv
        return conv.key if conv is not None else None

    @property
    def log(self) -> FilteringBoundLogger:
        """The run's logger: the observer's, bound to the session once the agent is built."""
        return self.observer.log

    # ---- lifecycle -------------------------------------------------------------------

    async def execute(self) -> RunResult:
        """Run to the end; returns the result, raises a start-up failure, re-raises
        cancellation (after the final checkpoint)."""
        self._started_at = self.opts.clock.monotonic()
        controls = self.controls
        controls.wake = Wake(controls.inbox)
        try:
            with anyio.CancelScope() as scope:
                controls.scope = scope
                if controls.stop_requested:
                    scope.cancel()
                try:  # the stack holds what the run connects (MCP servers) till it ends
                    async with AsyncExitStack() as self._resources:
                        session = await self._start()
                        if session is not None:
                            agent = session.agent
                            with self.observer.run_span(str(session.key), agent.name, agent.model):
                                await self._drive(session)
                except LeaseLost:  # an append the store refused: another holder has the session
                    self._fenced_out()
            if self.result is not None:
                return self.result
            lost = controls.life.lease_lost
            return await self._exit(StopReason.LEASE_LOST if lost else StopReason.CONTEXT_CANCELLED)
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(_FINAL_WRITE_TIMEOUT, shield=True):
                await self._exit(StopReason.CONTEXT_CANCELLED)
            raise
        except BaseException as exc:
            controls.fail(exc)
            raise
        finally:
            if self._keeper is not None:
                await self._release()
            self.observer.close()
            controls.end()

    async def _start(self) -> Session | None:
        """Build the agent and open (or resume) its session, then mark the run ready; the
        session the run works on.

        None when the resumed session had already finished: its stored result is the run's.
        """
        ref = self.resume_ref
        known: SessionState | None = None  # read once, under the lease, to resume
        if ref is not None:
            if ref.log.durable or self.adopted is not None:
                await self._hold(ref)
            known = await session_state(ref.log, ref.key)
            if await self._finished_already(ref, known) is not None:
                return None
        agent = await self._build()
        conv = self._open(agent)
        pricing = await self._pricing(agent)
        if ref is None:
            self._refuse_unpriced_cap(agent, pricing)
            if agent.session is not None:
                await refuse_started(conv.log, conv.key)
        tools = await open_tool_table(
            agent, self._resources, self.log, clock=self.opts.clock, time_left=self.wallclock_left
        )
        self.session = session = Session(agent, conv, pricing, tools)
        if self._keeper is None and conv.log.durable:
            key = conv.key
            await self._hold(SessionRef(conv.log, key.app, key.user, key.session_id))
        if self._keeper is not None:
            conv.lease = self._keeper.lease  # every append of the run is fenced by it
        if ref is not None:
            await self._watch_after(await self._resume(session, known), conv)
        else:
            conv.history.goal = self.goal
            # A new session's inbox and control are read from its first event: whatever was
            # sent to it before this run took its lease is obeyed (a stop) or delivered.
            await self._watch_after(0, conv)
            if conv.log.durable:
                await self._record_start(conv)
        self.controls.ready.set()
        return session

    async def _watch_after(self, seq: int, conv: Conversation) -> None:
        """Obey the inbox and control events after ``seq`` now, and (on a durable session)
        watch for the later ones."""
        keeper = self._keeper
        if keeper is not None:
            await keeper.start_watching_after(seq)
            if seq == 0:
                await keeper.poll()
            return
        if seq == 0:  # no watch: one read of what was sent before the run
            for event in await conv.log.read(conv.key, kinds=WATCH_KINDS):
                self.controls.apply_remote(event)

    async def _record_start(self, conv: Conversation) -> None:
        """Record a new durable session's start before its first turn: its budgets, and a
        first checkpoint (no turns yet, the goal as the next prompt), so that a run that dies
        in its first turn leaves a session that is listed, resumed with its goal and budgets,
        and never started again as new."""
        conv.record(budgets_of(self.opts))
        conv.record(self._checkpoint_of(conv, None))
        await conv.flush()

    async def _resume(self, session: Session, known: SessionState | None) -> int:
        """Put the run where its session's log left it (``known``: its state as read under
        the lease); the last seq read."""
        conv = session.conv
        restored = await restore(conv.log, conv.key, window=conv.window, known=known)
        self._adopt_budgets(session, restored.budgets)
        prompt = self.opts.continuation_prompt
        resumed = _resumed_state(restored, continuation_prompt=prompt)
        # What the run's controllers asked before it got here (a stop, a pause) still holds.
        self.cell.state = attrs.evolve(resumed, life=self.cell.state.life)
        inbox = self.controls.inbox
        for message_id in restored.delivered:
            inbox.forget(message_id)
        for message in restored.pending:
            inbox.add(message)
        if restored.paused:
            self.controls.set_paused(True)
        conv.history = restored.history  # with its goal: the checkpoint's, else the first prompt
        self.log.info("run_resumed", **describe(restored))
        await self._close_complete_turn(conv)
        return restored.last_seq

    def _adopt_budgets(self, session: Session, recorded: Budgets | None) -> None:
        """Run under the session's recorded budgets, but for those given to this resume
        explicitly (a change, recorded in the log); a session from before budgets were
        recorded runs under the options' and has them recorded now."""
        given = {name: getattr(self.opts, name) for name in self.budgets_given}
        budgets = attrs.evolve(recorded, **given) if recorded is not None else budgets_of(self.opts)
        self.opts = with_budgets(self.opts, budgets)
        self._refuse_unpriced_cap(session.agent, session.pricing)
        if budgets != recorded:  # in the run's next write, with what it changes
            session.conv.record(budgets)
            self.log.info("budgets_recorded", **attrs.asdict(budgets))

    async def _drive(self, session: Session) -> RunResult:
        """The keeper's tasks (on a durable session) around the loop."""
        deps = await self._loop_deps(session)
        agent = session.agent
        keeper = self._keeper
        if keeper is None:
            return await run_loop(deps, self.cell, agent)
        failure: BaseException | None = None
        async with anyio.create_task_group() as tg:
            keeper.start(tg)
            try:
                result = await run_loop(deps, self.cell, agent)
            except anyio.get_cancelled_exc_class():
                # A stop, the caller's cancellation or a lost lease: the last writes go now,
                # while the keeper's tasks end (a renewal in flight must not hold them up).
                tg.cancel_scope.cancel()
                lost = self.controls.life.lease_lost
                with anyio.CancelScope(shield=True):
                    await self._exit(
                        StopReason.LEASE_LOST if lost else StopReason.CONTEXT_CANCELLED
                    )
                raise
            except Exception as exc:  # re-raised below as itself, not as an exception group
                failure = exc
            finally:
                tg.cancel_scope.cancel()  # the keeper's tasks end with the loop
        if failure is not None:
            raise failure
        return result

    async def _loop_deps(self, session: Session) -> LoopDeps:
        pricing = session.pricing
        self.cell.evolve(unpriced=pricing.is_zero)

        async def checkpoint(
            stop_reason: StopReason | None, *, next_wake_at: datetime | None = None
        ) -> None:
            await self._checkpoint(session.conv, stop_reason, next_wake_at=next_wake_at)

        return LoopDeps(
            opts=self.opts,
            conv=session.conv,
            controls=self.controls,
            exit_tools=self.exit_tools,
            observer=self.observer,
            pricing=pricing,
            elapsed=self.elapsed,
            poll_inbox=self.poll_inbox,
            checkpoint=checkpoint,
            exit=self._exit,
            tool_table=session.tools,
            compactor=await compactor_for(self.opts, self.cell.state.meter, self.observer),
        )

    async def _hold(self, ref: SessionRef) -> None:
        self._keeper = SessionKeeper(
            ref.log,
            ref.key,
            self.opts,
            on_lost=self.lease_lost,
            on_event=self.controls.apply_remote,
            adopted=self.adopted,
            call_timeout=_FINAL_WRITE_TIMEOUT,  # none in flight outlasts the last writes
        )
        await self._keeper.begin(self._resources)

    async def _finished_already(self, ref: SessionRef, session: SessionState) -> RunResult | None:
        """The stored result of a session (in state ``session``) that completed, or that was
        stopped on purpose and is not resumed with ``force``; None when the session is to
        run."""
        if session.completed:
            reason = StopReason.COMPLETED
        elif session.stopped and not self.force:
            reason = StopReason.CONTEXT_CANCELLED
            self.log.info("resume_refused_stopped", session=str(ref.key))
        else:
            return None
        cp = session.checkpoint
        waiting: tuple[str, ...] = ()
        if cp is not None:  # messages acknowledged after it stay reported
            waiting = await undelivered(ref.log, ref.key, cp, session.checkpoint_seq)
        cp = cp or Checkpoint(0, 0, 0, 0.0, "")
        state = RunState.from_checkpoint(cp)
        result = state.to_result(reason, session_id=ref.session_id, undelivered=waiting)
        self._finish(result, stopped=reason is StopReason.CONTEXT_CANCELLED)
        if reason is StopReason.CONTEXT_CANCELLED and not cp.stopped:
            # Make the stop part of the session's state, so a daemon no longer finds it due.
            stopped = attrs.evolve(cp, stop_reason=reason.value, stopped=True)
            await self._append_last(ref, [Event.create(ref.key, stopped, author=_AUTHOR)])
        return result

    async def _append_last(self, ref: SessionRef, events: list[Event]) -> None:
        if self._keeper is not None:
            await self._keeper.append_last(events)
        else:
            await ref.log.append(events)

    async def _close_complete_turn(self, conv: Conversation) -> None:
        """Close a resumed turn whose last answer is in the log but not its checkpoint."""
        unfinished = self.cell.state.resumed_turn
        if unfinished is None or not unfinished.complete:
            return
        self.cell.evolve(resumed_turn=None, next_prompt=self.opts.continuation_prompt)
        inbox = self.controls.inbox
        batch = tuple(m for m in inbox.snapshot() if m.message_id in unfinished.inbox_ids)
        if batch:
            inbox.delivered(batch)
            conv.record(InboxDelivered(tuple(m.message_id for m in batch), unfinished.turn))
        await self._checkpoint(conv, None)

    async def _build(self) -> Agent:
        extra = self.exit_tools.tools()
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

    def _open(self, agent: Agent) -> Conversation:
        ref = agent.session or self.resume_ref
        if ref is None:
            ref = SessionRef(MemoryEventLog(), "autonomous", "local", new_event_id())
        key = ref.key
        summarised = self.opts.history_summary_model is not None
        window = Window(self.opts.history_turns, self.opts.history_keep, summarised)
        conv = Conversation(ref.log, key, agent.system_prompt(), _AUTHOR, window=window)
        self.controls.conv = conv
        self.observer.bind(session=str(key), agent=agent.name)
        if self.opts.done_tool_name not in {t.name for t in agent.tools}:
            self.log.warning("done_tool_missing", tool=self.opts.done_tool_name)
        return conv

    async def _pricing(self, agent: Agent) -> Pricing:
        """The run's prices: its ``pricing`` option, else litellm's for a litellm model, else
        none (every cost is zero)."""
        if self.opts.pricing is not None:
            return self.opts.pricing
        if isinstance(agent.model, LiteLLMModel):
            try:  # in a thread: the first use imports litellm (seconds), the loop must go on
                return await anyio.to_thread.run_sync(Pricing.for_model, agent.model.name)
            except LookupError:
                pass
        return _NO_PRICING

    def _refuse_unpriced_cap(self, agent: Agent, pricing: Pricing) -> None:
        """A dollar cap needs prices to count with: without them every call costs $0 and
        the cap could never stop the run."""
        cap = self.opts.max_cost_usd
        if cap and pricing.is_zero:
            raise ConfigurationError(
                f"max_cost_usd={cap:g} could never stop this run: model {agent.model.name!r} "
                "has no prices (none given, and litellm's price table does not list it); pass "
                "pricing=Pricing(input_per_mtok=..., output_per_mtok=...) (USD per million "
                "tokens), or leave max_cost_usd at 0"
            )

    async def poll_inbox(self) -> None:
        """Read the inbox and control events other processes appended since the log watch
        last looked: a run about to end learns of every message acknowledged so far."""
        with anyio.move_on_after(_FINAL_WRITE_TIMEOUT, shield=True):
            await self._read_inbox()

    async def _read_inbox(self) -> None:
        """:meth:`poll_inbox`, bounded by the caller."""
        keeper = self._keeper
        if keeper is None or keeper.lost or keeper.lease is None:
            return
        try:
            await keeper.poll()
        except EventLogError as exc:  # the checkpoint's horizon still covers them
            self.log.warning("inbox_poll_failed", error=type(exc).__name__)

    @contextmanager
    def _last_writes(self) -> Iterator[anyio.CancelScope]:
        """A shielded scope for one of the run's last calls to the store, cancelled when the
        time they share is up: ``_FINAL_WRITE_TIMEOUT`` on the run's clock from the first.

        Shared, not one each: the inbox's last read, the final checkpoint and the release
        would otherwise add up their bounds against a store that does not answer. A store
        that honours a deadline (PostgreSQL, which otherwise answers a cancelled caller
        first) ends its statement then too.
        """
        with self.opts.clock.move_on_after(self._time_left()) as scope:
            scope.shield = True
            yield scope

    def _time_left(self) -> float:
        """Seconds left of the last writes' time (starting it now if it has not begun)."""
        clock = self.opts.clock
        if self._last_by is None:
            self._last_by = clock.monotonic() + _FINAL_WRITE_TIMEOUT
        return max(self._last_by - clock.monotonic(), 0.0)

    async def _release(self) -> None:
        """Drop the lease the run still holds (its last write did not take it along), within
        the last writes' time; one that is up leaves the lease to expire."""
        keeper = self._keeper
        if keeper is None or not keeper.holding:
            return
        if not self._time_left():
            self.log.warning("lease_left_to_expire", lease_ttl=self.opts.lease_ttl)
            return
        with self._last_writes():
            await keeper.release()

    def elapsed(self) -> float:
        """Seconds since this process started the run."""
        return self.opts.clock.monotonic() - self._started_at

    def wallclock_left(self) -> float | None:
        """Seconds left of ``max_wallclock`` (None: no such budget)."""
        cap = self.opts.max_wallclock
        return cap - self.elapsed() if cap else None

    def _fenced_out(self) -> None:
        """The store refused one of our appends: the session is another holder's now."""
        if self._keeper is not None:
            self._keeper.lost = True
        self.lease_lost()

    def lease_lost(self) -> None:
        """Another process took the session over: stop now and write nothing more."""
        self.log.warning("lease_lost")
        if self.session is not None:
            self.session.conv.discard_pending()
        self.controls.lose_lease()

    # ---- exits and checkpoints -------------------------------------------------------

    async def _checkpoint(
        self,
        conv: Conversation,
        stop_reason: StopReason | None,
        *,
        next_wake_at: datetime | None = None,
        last: bool = False,
    ) -> None:
        """Append a checkpoint; it closes the turn before it (unless it left it open for a
        retry), and records the failure behind it when the turn failed."""
        keeper = self._keeper
        checkpoint = self._checkpoint_of(conv, stop_reason, next_wake_at=next_wake_at)
        self.cell.evolve(last_turn_failed=False)
        conv.record(checkpoint)
        if last and keeper is not None:  # the lease goes with the run's last write
            await keeper.append_last(conv.take_pending(), stop_reason)
        else:
            await conv.flush()
        reason = stop_reason.value if stop_reason else None
        # Right after the commit: listeners now hear of the answer held for it (_observer).
        await self.observer.emit(CheckpointWritten(checkpoint.turns, reason))

    def _checkpoint_of(
        self,
        conv: Conversation,
        stop_reason: StopReason | None,
        *,
        next_wake_at: datetime | None = None,
    ) -> Checkpoint:
        """The checkpoint of the run, on ``conv``, as it stands."""
        keeper, controls = self._keeper, self.controls
        checkpoint = self.cell.state.to_checkpoint(
            stop_reason,
            goal=conv.history.goal,
            next_wake_at=next_wake_at,
            inbox_from_seq=controls.inbox.oldest_seq(),
            paused=controls.paused,
            stopped=controls.stop_requested,
            unseen_from=keeper.seen + 1 if keeper is not None else 0,
            budgets=budgets_of(self.opts),
        )
        if self.opts.agent_version:  # which agent wrote it: a worker checks before resuming
            checkpoint = attrs.evolve(checkpoint, agent_version=self.opts.agent_version)
        return checkpoint

    def _finish(self, result: RunResult, *, stopped: bool = False) -> None:
        self.result = result
        self.controls.finish(result.reason, stopped=stopped)

    async def _exit(
        self, reason: StopReason, error: BaseException | None = None, *, why: str = ""
    ) -> RunResult:
        if self.result is not None:
            return self.result
        if why:
            self.cell.evolve(abort_reason=why)
        if error is not None:  # the failure behind the exit goes into the final checkpoint
            self.cell.evolve(error=error_record(error))
        state = self.cell.state
        lost = reason is StopReason.LEASE_LOST  # the session is no longer ours to read or write
        if not lost:
            with self._last_writes():  # what came since the last poll is reported, not dropped
                await self._read_inbox()
        pending = tuple(m.text for m in self.controls.inbox.snapshot())
        key = self.key
        result = state.to_result(
            reason,
            session_id=key.session_id if key is not None else "",
            duration=self.elapsed(),
            error=error,
            undelivered=pending,
        )
        self._finish(result)
        self.observer.count_stop(reason.value)
        session = self.session
        if session is not None and not self._final_written and not lost:
            reason = await self._final_checkpoint(session.conv, reason)
            if reason is StopReason.LEASE_LOST:  # the store refused it: nothing was written
                self.result = result = attrs.evolve(result, reason=reason, error=None)
        if pending:
            self.log.warning("inbox_undelivered", messages=len(pending))
        self.controls.finish(reason)  # lease_lost, when the store refused the last write
        spent = state.meter.spent
        await self.observer.emit(
            RunExited(spent.turns, reason.value),
            input_tokens=spent.input_tokens,
            output_tokens=spent.output_tokens,
            cost_usd=spent.cost_usd,
        )
        return result

    async def _final_checkpoint(self, conv: Conversation, reason: StopReason) -> StopReason:
        """Write the last checkpoint (the lease goes with it); the reason the run ends with
        (``lease_lost`` when the store refused it)."""
        self._final_written = True
        # A call cut short (a stop during a tool) is answered in the log, so a resume sends a
        # conversation the provider accepts. A sleep's wake time is kept: a resume waits out
        # the rest of it.
        conv.answer_open_calls(INTERRUPTED, self.cell.state.meter.spent.turns)
        missing = "TimeoutError"  # why it is missing, unless written
        try:
            if self._time_left():
                with self._last_writes() as scope:
                    await self._checkpoint(
                        conv, reason, next_wake_at=self.cell.state.next_wake_at, last=True
                    )
                if not scope.cancelled_caught:
                    return reason
        except LeaseLost:  # nothing of ours was written: the run ends as lease_lost
            self._fenced_out()
            return StopReason.LEASE_LOST
        except EventLogError as exc:
            if reason is not StopReason.CONTEXT_CANCELLED:
                raise  # the log cannot record how the run ended: the run fails
            missing = type(exc).__name__  # a stop is a stop, recorded or not
        # A resume goes on from the checkpoint before (the turns since are in the log).
        self.log.error(
            "final_checkpoint_not_written",
            reason=reason.value,
            error=missing,
            timeout=_FINAL_WRITE_TIMEOUT,
        )
        return reason


def _resumed_state(restored: Restored, *, continuation_prompt: str) -> RunState:
    """Where a resumed run starts: its checkpoint, any crashed turn after it, and the
    control requests since (a wake ends the resume's wait)."""
    cp = restored.checkpoint
    if cp is None:
        state = RunState(Meter(restored.totals), continuation_prompt)
    else:
        state = RunState.from_checkpoint(cp, totals=restored.totals)
    wake = None if restored.woken else state.next_wake_at
    return attrs.evolve(state, next_wake_at=wake, resumed_turn=restored.unfinished)


async def refuse_started(log: EventLog, key: SessionKey) -> None:
    """Refuse to start ``key`` as a new session when a run started it already (a checkpoint,
    or a conversation a run left before its first checkpoint): its totals would start from
    zero and its history hold two first turns. Injects, control requests and notes sent
    before the first run do not count: the first run reads them."""
    started = await log.latest_checkpoint(key) is not None or bool(
        await log.read_last(key, [EventKind.USER_MESSAGE, EventKind.ASSISTANT_MESSAGE], 1)
    )
    if started:
        raise ConfigurationError(
            f"session {key} already exists: continue it with "
            "resume_autonomous(build, ref, ...), or start a new session_id"
        )
