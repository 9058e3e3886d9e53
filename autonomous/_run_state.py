"""The run's state as one value: totals, goal, next prompt and wake, done signal, retries.

It turns into a checkpoint and a result, and a checkpoint turns back into it (resume, and a
session that finished already). A frozen value, kept in one :class:`StateCell` per run and
replaced whole: by :func:`~autonomous._decide.next_step` after each attempt, and by the few
changes the loop and the run make around it (a resume, a wake, the exit's reason).

The one part that changes inside a turn is the :class:`Tally`, the run's meter: each model
call adds to it as it is made, so that a budget is checked between two calls of one turn and
a run cut short mid-turn still reports what that turn spent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

from eventlog import Budgets, Checkpoint

from ._decide import Retrying, Totals
from ._restore import Restored, Unfinished
from ._result import RunResult, StopReason
from ._turn import Tally

__all__ = ["Retrying", "RunState", "StateCell"]


@attrs.frozen(eq=False)
class RunState:
    """Where a run stands: what a checkpoint records of it, and what its result reports."""

    #: The run's meter: totals and the last answer's text, updated call by call.
    tally: Tally
    #: The run's goal: the first prompt, pinned in the system message when turns are trimmed.
    goal: str
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
    resumed_turn: Unfinished | None = None
    #: The turn whose failed attempt the next attempt continues (a retry).
    retrying: Retrying | None = None
    #: Supervisor guidance framed into the next turn's prompt ("" = none).
    steer: str = ""
    #: Why a supervisor (or pause_max) aborted the run.
    abort_reason: str = ""
    #: The run has no prices for its model: its cost counts nothing (checkpoints say so).
    unpriced: bool = False

    @classmethod
    def fresh(cls, goal: str) -> RunState:
        """A new run's state: nothing spent, the goal is the first prompt."""
        return cls(Tally(Totals()), goal=goal, next_prompt=goal)

    @classmethod
    def from_checkpoint(
        cls, cp: Checkpoint, *, goal: str = "", totals: Totals | None = None
    ) -> RunState:
        """The state ``cp`` recorded; ``totals`` when a crashed turn spent more after it."""
        spent = Totals.from_checkpoint(cp)
        return cls(
            Tally(totals if totals is not None else spent, cp.final_text),
            goal=cp.goal or goal,
            next_prompt=cp.next_prompt,
            next_wake_at=cp.next_wake_at,
            done_detail=cp.done_detail,
            outcome=cp.outcome,
            outcome_result=cp.result,
            failed_attempts=cp.failed_attempts,
        )

    @classmethod
    def from_restored(cls, restored: Restored, *, continuation_prompt: str) -> RunState:
        """Where a resumed run starts: its checkpoint, any crashed turn after it, and the
        control requests since (a wake ends the resume's wait)."""
        cp = restored.checkpoint
        if cp is None:
            state = cls(Tally(restored.totals), restored.goal, continuation_prompt)
        else:
            state = cls.from_checkpoint(cp, goal=restored.goal, totals=restored.totals)
        wake = None if restored.woken else state.next_wake_at
        return attrs.evolve(state, next_wake_at=wake, resumed_turn=restored.unfinished)

    def to_checkpoint(
        self,
        stop_reason: StopReason | None,
        *,
        next_wake_at: datetime | None,
        inbox_from_seq: int,
        paused: bool,
        stopped: bool,
        unseen_from: int,
        budgets: Budgets,
    ) -> Checkpoint:
        """The checkpoint of this state; the fields the run's controls and log watch own are
        passed in."""
        t = self.tally.totals
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
            final_text=self.tally.final_text,
            outcome=self.outcome,
            result=self.outcome_result,
            model_calls=t.model_calls,
            turn_failed=self.last_turn_failed,
            failed_attempts=self.failed_attempts,
            goal=self.goal,
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
        t = self.tally.totals
        return RunResult(
            reason=reason,
            final_text=self.tally.final_text,
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
