"""The run's state as one value: spending, next prompt and wake, done signal, retries, and its
lifecycle (pause, stop, the end), from which the handle's status is derived.

It turns into a checkpoint and a result, and a checkpoint turns back into it (resume, and a
session that finished already). The goal is not part of it: the conversation's
:class:`~autonomous._state._history.History` holds it (one source, the same live and resumed),
and the checkpoint is given it. A frozen value, kept in one :class:`StateCell` per run and
replaced whole: by :func:`~autonomous._run._decide.next_step` after each attempt, by the few
changes the loop and the run make around it (a resume, a wake, the exit's reason), and by
the run's controls (pause, resume, stop, a lost lease, the end), which change its
:class:`Lifecycle` in one method. No status is stored: :attr:`Lifecycle.status` computes it,
as anyio's ``TaskHandle.status`` does.

The one part that changes inside a turn is its :class:`Meter`: each model call adds to it as
it is made, so that a budget is checked between two calls of one turn and a run cut short
mid-turn still reports what that turn spent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

from eventlog import Budgets, Checkpoint
from usage import Usage

from .._result import AutonomousStatus, RunResult, StopReason
from ._history import OpenTurn

__all__ = [
    "Lifecycle",
    "Meter",
    "Retrying",
    "RunState",
    "Spending",
    "StateCell",
    "status_for",
]


@attrs.frozen
class Spending:
    """What a run has spent so far: turns, tokens, dollars and model calls, as one frozen value
    that adds up with ``+`` (the run's own accounting; :class:`usage.UsageTotals` is a usage
    tracker's). ``cached_input_tokens`` is the part of ``input_tokens`` the provider read from
    its prompt cache."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0
    cached_input_tokens: int = 0

    def __add__(self, other: Spending) -> Spending:
        return Spending(
            self.turns + other.turns,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
            self.model_calls + other.model_calls,
            self.cached_input_tokens + other.cached_input_tokens,
        )

    @classmethod
    def from_checkpoint(cls, cp: Checkpoint) -> Spending:
        """The spending ``cp`` recorded (an old checkpoint without cached tokens counts 0)."""
        return cls(
            cp.turns,
            cp.input_tokens,
            cp.output_tokens,
            cp.cost_usd,
            cp.model_calls,
            cp.cached_input_tokens,
        )

    @classmethod
    def of_call(cls, usage: Usage, cost_usd: float) -> Spending:
        """What one model call with ``usage`` costing ``cost_usd`` spends."""
        return cls(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost_usd=cost_usd,
            model_calls=1,
            cached_input_tokens=usage.cached_input_tokens,
        )

    def add_call(
        self, input_tokens: int, output_tokens: int, cost_usd: float, cached_input_tokens: int = 0
    ) -> Spending:
        """This spending plus one model call."""
        return self + Spending.of_call(
            Usage(input_tokens, output_tokens, cached_input_tokens), cost_usd
        )

    def add_turn(self) -> Spending:
        """This spending plus one executed turn."""
        return self + Spending(turns=1)


@attrs.define
class Meter:
    """The run's meter, the one mutable part of its state: what it has spent so far (a
    :class:`Spending`, replaced at each call) and its last answer text, updated call by call, and
    what the last call's prompt measured (its size in characters, its input tokens as the provider
    counted them), from which the next call's input is estimated."""

    spent: Spending
    final_text: str = ""
    last_prompt_chars: int = 0
    last_input_tokens: int = 0
    #: The most output tokens one call of the run produced (the output reserve of last resort).
    most_output_tokens: int = 0


@attrs.frozen
class Retrying:
    """A turn whose attempt failed and goes on in a retry: its number, and the inbox messages
    its prompt carries (delivered once an attempt of it succeeds)."""

    turn: int
    inbox_ids: tuple[str, ...]


def status_for(reason: StopReason, stop_requested: bool) -> str:
    """The handle status a finished run reports."""
    if reason is StopReason.COMPLETED:
        return "completed"
    if reason is StopReason.DEFERRED:
        return "deferred"
    if reason is StopReason.CONTEXT_CANCELLED and stop_requested:
        return "stopped"
    return "failed"


@attrs.frozen
class Lifecycle:
    """Where a run stands to those who control it: what the handle, the log watch and the
    loop's parking set, and how it ended. The status is derived from it, never stored."""

    #: A pause is asked for: the loop parks at its next turn boundary.
    paused: bool = False
    #: The loop is parked (paused, or asleep until a wake).
    parked: bool = False
    #: The pause has taken hold: the loop parked, or slept, while paused (till a resume).
    held: bool = False
    stop_requested: bool = False
    #: Another holder took the session over: the run stops and ends ``lease_lost``.
    lease_lost: bool = False
    #: Why the run ended (None while it runs): control requests are refused from then on.
    ended: StopReason | None = None
    #: The run's own failure (a failing build).
    failure: BaseException | None = attrs.field(default=None, eq=False)

    def changed(self, **changes: Any) -> Lifecycle:
        """This lifecycle with ``changes``: a pause takes hold once the loop is parked while
        paused, and lets go at a resume."""
        life = attrs.evolve(self, **changes)
        held = life.paused and (life.held or life.parked)
        return life if held == life.held else attrs.evolve(life, held=held)

    @property
    def status(self) -> AutonomousStatus:
        """The status a handle reports: failed, how the run ended, stopped, paused, running."""
        if self.failure is not None:
            return AutonomousStatus.FAILED
        if self.ended is not None:
            return AutonomousStatus(status_for(self.ended, self.stop_requested))
        if self.stop_requested:
            return AutonomousStatus.STOPPED
        if self.held:
            return AutonomousStatus.PAUSED
        return AutonomousStatus.RUNNING


@attrs.frozen(eq=False)
class RunState:
    """Where a run stands: what a checkpoint records of it, and what its result reports."""

    #: The run's meter: its spending and the last answer's text, updated call by call.
    meter: Meter
    #: The prompt of the next turn.
    next_prompt: str
    #: When a scheduled sleep (or a deferred session) wakes; None while awake.
    next_wake_at: datetime | None = None
    done_detail: str = ""
    outcome: str | None = None
    outcome_result: Any = None
    #: Consecutive failed attempts of the current turn (the retry policy's ``attempt``).
    failed_attempts: int = 0
    #: The done tool was called while inbox messages waited: one more turn delivers them.
    finishing: bool = False
    #: The last attempt failed (its checkpoint says so).
    last_turn_failed: bool = False
    #: The failure behind the last failed attempt, as checkpoints record it ("" after a turn
    #: that did not fail).
    error: str = ""
    #: The turn a crash left unfinished, which the first turn of a resumed run goes on with.
    resumed_turn: OpenTurn | None = None
    #: The turn whose failed attempt the next attempt continues (a retry).
    retrying: Retrying | None = None
    #: Supervisor guidance framed into the next turn's prompt ("" = none).
    steer: str = ""
    #: Why a supervisor (or pause_max) aborted the run.
    abort_reason: str = ""
    #: The run has no prices for its model: its cost counts nothing (checkpoints say so).
    unpriced: bool = False
    #: Pause, stop and the end, as those who control the run set them.
    life: Lifecycle = attrs.field(factory=Lifecycle)

    @classmethod
    def fresh(cls, goal: str) -> RunState:
        """A new run's state: nothing spent, the goal is the first prompt."""
        return cls(Meter(Spending()), next_prompt=goal)

    @classmethod
    def from_checkpoint(cls, cp: Checkpoint, *, totals: Spending | None = None) -> RunState:
        """The state ``cp`` recorded; ``totals`` when a crashed turn spent more after it."""
        spent = Spending.from_checkpoint(cp)
        return cls(
            Meter(totals if totals is not None else spent, cp.final_text),
            next_prompt=cp.next_prompt,
            next_wake_at=cp.next_wake_at,
            done_detail=cp.done_detail,
            outcome=cp.outcome,
            outcome_result=cp.result,
            failed_attempts=cp.failed_attempts,
        )

    def to_checkpoint(
        self,
        stop_reason: StopReason | None,
        *,
        goal: str,
        next_wake_at: datetime | None,
        inbox_from_seq: int,
        paused: bool,
        stopped: bool,
        unseen_from: int,
        budgets: Budgets,
    ) -> Checkpoint:
        """The checkpoint of this state; the fields the run's conversation (its goal), controls
        and log watch own are passed in."""
        t = self.meter.spent
        return Checkpoint(
            turns=t.turns,
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            cost_usd=t.cost_usd,
            cached_input_tokens=t.cached_input_tokens,
            next_prompt=self.next_prompt,
            stop_reason=stop_reason.value if stop_reason is not None else None,
            next_wake_at=next_wake_at,
            done_detail=self.done_detail,
            final_text=self.meter.final_text,
            outcome=self.outcome,
            result=self.outcome_result,
            model_calls=t.model_calls,
            turn_failed=self.last_turn_failed,
            failed_attempts=self.failed_attempts,
            goal=goal,
            inbox_from_seq=inbox_from_seq,
            unpriced=self.unpriced,
            paused=paused,
            stopped=stopped,
            unseen_from=unseen_from,
            budgets=budgets,
            error=self.error,
            open_turn=self.retrying.turn if self.retrying is not None else 0,
        )

    def to_result(
        self,
        reason: StopReason,
        *,
        session_id: str,
        duration: float = 0.0,
        error: BaseException | None = None,
        undelivered: tuple[str, ...] = (),
    ) -> RunResult:
        """The result of a run that ends here for ``reason`` (a wake time only when deferred,
        an error only behind ``retry_policy_aborted``)."""
        t = self.meter.spent
        return RunResult(
            reason=reason,
            final_text=self.meter.final_text,
            turns=t.turns,
            input_tokens=t.input_tokens,
            output_tokens=t.output_tokens,
            cached_input_tokens=t.cached_input_tokens,
            cost_usd=t.cost_usd,
            duration=duration,
            done_detail=self.done_detail,
            next_wake_at=self.next_wake_at if reason is StopReason.DEFERRED else None,
            error=error if reason is StopReason.RETRY_POLICY_ABORTED else None,
            outcome=self.outcome,
            result=self.outcome_result,
            session_id=session_id,
            abort_reason=self.abort_reason,
            undelivered=undelivered,
        )


@attrs.define(eq=False)
class StateCell:
    """The one place a run's state is kept; it is replaced whole, never changed in part."""

    state: RunState

    def evolve(self, **changes: Any) -> RunState:
        """Replace the state with a copy that has ``changes``; the new state."""
        self.state = attrs.evolve(self.state, **changes)
        return self.state
