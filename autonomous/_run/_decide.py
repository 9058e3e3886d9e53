"""The loop's decisions as pure functions over frozen values: budgets, next step, next prompt.

A turn's attempt reports what it did as a :class:`TurnOutcome`; the loop adds what it found
out around it (:class:`Seen`: the retry policy's answer, late inbox messages, the time) and
:func:`next_step` decides everything that follows in one place, as a :class:`Next` value:
the step, the run's new state, and what the loop records. The loop only awaits and records.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from scheduler import ScheduleEvent

from .._control._inbox import InboxMessage, inbox_block
from .._options import RunOptions
from .._result import RetryDecision, StopReason
from .._state._run_state import Retrying, RunState, Spending
from .._tools._exit_tools import DoneSignal
from .._tools._tool_result import error_record

__all__ = [
    "CHARS_PER_TOKEN",
    "Attempt",
    "Continue",
    "Finish",
    "Next",
    "Retry",
    "Retrying",
    "Seen",
    "Spending",
    "Step",
    "TurnOutcome",
    "Wait",
    "budget_before_turn",
    "call_budget",
    "call_would_pass",
    "clamp_wake",
    "ends_completed",
    "estimate_input_tokens",
    "late_messages_prompt",
    "next_step",
    "prompt_chars",
    "turn_budget",
    "turn_prompt",
]


def _spend_exceeded(opts: RunOptions, totals: Spending) -> StopReason | None:
    if opts.max_input_tokens and totals.input_tokens >= opts.max_input_tokens:
        return StopReason.MAX_TOKENS_EXCEEDED
    if opts.max_output_tokens and totals.output_tokens >= opts.max_output_tokens:
        return StopReason.MAX_TOKENS_EXCEEDED
    if opts.max_cost_usd and totals.cost_usd >= opts.max_cost_usd:
        return StopReason.MAX_COST_EXCEEDED
    return None


def turn_budget(opts: RunOptions, totals: Spending, elapsed: float) -> StopReason | None:
    """The budget that forbids the next turn, checked in order: wall-clock, turns, input
    tokens, output tokens, cost. A zero cap is off."""
    if opts.max_wallclock and elapsed >= opts.max_wallclock:
        return StopReason.WALLCLOCK_EXCEEDED
    if opts.max_turns and totals.turns >= opts.max_turns:
        return StopReason.MAX_TURNS_EXCEEDED
    return _spend_exceeded(opts, totals)


def call_budget(opts: RunOptions, totals: Spending, elapsed: float) -> StopReason | None:
    """The budget that forbids the next model call inside a turn (turns do not apply)."""
    if opts.max_wallclock and elapsed >= opts.max_wallclock:
        return StopReason.WALLCLOCK_EXCEEDED
    return _spend_exceeded(opts, totals)


#: Characters per token of a prompt never measured: JSON text runs at about four.
CHARS_PER_TOKEN = 4


def prompt_chars(messages: Sequence[dict[str, Any]], specs: Sequence[dict[str, Any]]) -> int:
    """The size of a request's prompt as compact JSON text: its messages and tool specs."""
    return len(_compact([*messages, *specs]))


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def estimate_input_tokens(chars: int, last_chars: int, last_tokens: int) -> int:
    """The input tokens of a prompt of ``chars`` characters, from the last call's prompt
    (``last_chars`` characters that the provider counted as ``last_tokens``).

    A grown prompt is the last one plus the new text at four characters a token; a shrunk one
    (history dropped) scales the last count; without a last call, four characters a token.
    """
    if last_chars <= 0 or last_tokens <= 0:
        return math.ceil(chars / CHARS_PER_TOKEN)
    if chars >= last_chars:
        return last_tokens + math.ceil((chars - last_chars) / CHARS_PER_TOKEN)
    return math.ceil(last_tokens * chars / last_chars)


def call_would_pass(
    opts: RunOptions, totals: Spending, *, input_tokens: int, most_cost_usd: float
) -> StopReason | None:
    """The cap the next model call would pass, with ``input_tokens`` of input and costing at
    most ``most_cost_usd``: input tokens, then cost (a zero cap is off). Reaching a cap
    exactly is allowed; the after-the-fact checks stop the run there."""
    if opts.max_input_tokens and totals.input_tokens + input_tokens > opts.max_input_tokens:
        return StopReason.MAX_TOKENS_EXCEEDED
    if opts.max_cost_usd and totals.cost_usd + most_cost_usd > opts.max_cost_usd:
        return StopReason.MAX_COST_EXCEEDED
    return None


@attrs.frozen
class Finish:
    """End the run with ``reason``; ``error`` is the turn or scheduler error behind
    ``retry_policy_aborted`` (it goes into the result)."""

    reason: StopReason
    error: BaseException | None = attrs.field(default=None, eq=False)


@attrs.frozen
class Retry:
    """Run the same prompt again (the failed attempt's inbox messages go with it), after
    waiting ``delay`` seconds (what the retry policy's ``delay`` asked for; 0 = at once)."""

    delay: float = 0.0


@attrs.frozen
class Continue:
    """Start the next turn with ``prompt``."""

    prompt: str


@attrs.frozen
class Wait:
    """Hand the schedule to the scheduler, then start the next turn with ``prompt``."""

    schedule: ScheduleEvent
    prompt: str


Step = Finish | Retry | Continue | Wait


@attrs.frozen
class TurnOutcome:
    """What one attempt of a turn did, as a value: :func:`next_step` decides what follows.

    ``text`` is the attempt's last answer text ("" if it gave none), ``spent`` what its model
    calls spent, ``done`` and ``schedule`` the accepted calls of the run's own tools (the
    last of each), ``error`` the failure that ended it, ``cap`` the budget that stopped it
    between two model calls (no further call may start).
    """

    text: str = ""
    spent: Spending = attrs.field(factory=Spending)
    done: DoneSignal | None = None
    schedule: ScheduleEvent | None = None
    error: BaseException | None = attrs.field(default=None, eq=False)
    cap: StopReason | None = None

    @property
    def failed(self) -> bool:
        """The attempt failed: an error, and no done signal (which wins over it)."""
        return self.error is not None and self.done is None


@attrs.frozen
class Attempt:
    """The attempt an outcome is of: its turn, the inbox messages its prompt carried, and
    the prompt it was given before the inbox block (a retry gives it again)."""

    turn: int
    inbox_ids: tuple[str, ...] = ()
    base_prompt: str = ""


@attrs.frozen
class Seen:
    """What the loop found out around an attempt, for :func:`next_step`: the retry policy's
    ``decision`` on a failed attempt (None: not asked, or no policy: abort) and the ``delay``
    it asks before the retry, whether inbox messages the attempt did not carry are
    ``waiting``, the run's ``elapsed`` seconds and the time ``now``."""

    now: datetime
    elapsed: float = 0.0
    decision: RetryDecision | None = None
    delay: float = 0.0
    waiting: bool = False


@attrs.frozen
class Next:
    """What follows an attempt: the ``step``, the run's new ``state``, whether the attempt's
    inbox messages reached the model (``deliver``), whether a checkpoint closes the turn now
    (``checkpoint``; else the exit that follows writes it) and, when ``max_defer`` held the
    wake back, the wake the model asked for (``clamped_from``)."""

    step: Step
    state: RunState
    deliver: bool
    checkpoint: bool
    clamped_from: datetime | None = None


def _outcome_step(state: RunState, outcome: TurnOutcome, seen: Seen, opts: RunOptions) -> Step:
    """What follows an attempt, before late inbox messages are counted. A done signal wins
    over an error, a cap and a schedule; an error goes by the retry policy's decision (none =
    abort); a cap ends the run; a schedule waits; else continue. After the turn that
    delivered late messages the run completes, unless it is retried."""
    go_on = opts.continuation_prompt
    step: Step
    if outcome.done is not None:
        step = Finish(StopReason.COMPLETED)
    elif outcome.error is not None:
        if seen.decision is RetryDecision.RETRY_TURN:
            step = Retry(seen.delay)
        elif seen.decision is RetryDecision.SKIP_TURN:
            step = Continue(go_on)
        else:
            step = Finish(StopReason.RETRY_POLICY_ABORTED, outcome.error)
    elif outcome.cap is not None:
        step = Finish(outcome.cap)
    elif outcome.schedule is not None:
        step = Wait(outcome.schedule, outcome.schedule.next_prompt or go_on)
    else:
        step = Continue(go_on)
    if state.finishing and not isinstance(step, Retry):
        step = Finish(StopReason.COMPLETED)
    return step


def ends_completed(state: RunState, outcome: TurnOutcome, seen: Seen, opts: RunOptions) -> bool:
    """Whether the attempt completes the run unless late inbox messages earn one more turn:
    the loop reads the inbox for :attr:`Seen.waiting` only then."""
    return _outcome_step(state, outcome, seen, opts) == Finish(StopReason.COMPLETED)


def late_messages_prompt(done_tool: str) -> str:
    """The prompt of the turn that delivers inbox messages which came after the done call."""
    return (
        f"New messages arrived after you called {done_tool}. Act on them if they need it, "
        f"then call {done_tool} again."
    )


def next_step(
    state: RunState, outcome: TurnOutcome, attempt: Attempt, seen: Seen, opts: RunOptions
) -> Next:
    """Everything that follows an attempt, decided at once: the step, the new state, what
    the loop records.

    A done signal wins over a schedule, a cap and an error. Inbox messages that wait when the
    run would complete, with budget left for a turn, earn one more turn, after which the run
    completes (unless it is retried). A wake is held to ``max_defer``. The next prompt is
    the schedule's, the continuation prompt, or (a retry) the attempt's own. A retried
    attempt keeps its inbox messages for the retry; a failed attempt that ends the run
    leaves them undelivered. A turn is checkpointed now unless the exit writes the
    checkpoint next: a finish, or a budget spent before the next turn.
    """
    failed = outcome.failed
    totals = state.meter.spent
    step = _outcome_step(state, outcome, seen, opts)
    finishing = state.finishing
    late = seen.waiting and turn_budget(opts, totals, seen.elapsed) is None
    if step == Finish(StopReason.COMPLETED) and late:
        finishing = True
        step = Continue(late_messages_prompt(opts.done_tool_name))
    clamped_from = None
    if isinstance(step, Wait):
        wake_at, clamped = clamp_wake(step.schedule.wake_at, seen.now, opts.max_defer)
        if clamped:
            clamped_from = step.schedule.wake_at
            step = attrs.evolve(step, schedule=attrs.evolve(step.schedule, wake_at=wake_at))
    changes: dict[str, Any] = {"finishing": finishing, "last_turn_failed": failed}
    if failed:
        assert outcome.error is not None
        changes["failed_attempts"] = state.failed_attempts + 1
        changes["error"] = error_record(outcome.error)
    else:
        changes.update(failed_attempts=0, steer="", error="")
    retried = isinstance(step, Retry)
    changes["retrying"] = Retrying(attempt.turn, attempt.inbox_ids) if retried else None
    if outcome.done is not None:
        done = outcome.done
        changes.update(done_detail=done.detail, outcome=done.outcome, outcome_result=done.result)
    if retried:
        changes["next_prompt"] = attempt.base_prompt
    elif isinstance(step, Continue | Wait):
        changes["next_prompt"] = step.prompt
    ends = isinstance(step, Finish)
    spent = isinstance(step, Continue) and turn_budget(opts, totals, seen.elapsed) is not None
    return Next(
        step=step,
        state=attrs.evolve(state, **changes),
        deliver=bool(attempt.inbox_ids) and not retried and not (failed and ends),
        checkpoint=not (ends or (not failed and spent)),
        clamped_from=clamped_from,
    )


def budget_before_turn(opts: RunOptions, state: RunState, elapsed: float) -> StopReason | None:
    """The budget that ends the run before the next turn; a run whose done tool was called
    ends ``completed`` when no budget is left for the turn that delivers its inbox, and a
    resumed turn counted already starts none."""
    totals = state.meter.spent
    reason = turn_budget(opts, totals, elapsed)
    if reason is not None and state.finishing:
        return StopReason.COMPLETED
    if (
        reason is StopReason.MAX_TURNS_EXCEEDED
        and state.resumed_turn is not None
        and totals.turns == opts.max_turns
    ):
        return None  # the unfinished turn is counted already: going on with it starts none
    return reason


def turn_prompt(state: RunState, inbox: tuple[InboxMessage, ...]) -> str:
    """A new turn's prompt: the supervisor's guidance, the inbox block, the next prompt."""
    prompt = inbox_block(inbox, state.next_prompt)
    return f"{state.steer}\n\n{prompt}" if state.steer else prompt


def clamp_wake(wake_at: datetime, now: datetime, max_defer: float) -> tuple[datetime, bool]:
    """``wake_at`` held to at most ``max_defer`` seconds after ``now`` (0 = no cap); True when
    clamped."""
    if max_defer and (wake_at - now).total_seconds() > max_defer:
        return now + timedelta(seconds=max_defer), True
    return wake_at, False
