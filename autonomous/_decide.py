"""The loop's decisions as pure functions over frozen values: budgets, next step, next prompt."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from eventlog import Checkpoint
from scheduler import ScheduleEvent
from usage import Usage

from ._exit_tools import DoneSignal
from ._options import RunOptions
from ._result import RetryDecision, StopReason


@attrs.frozen
class Totals:
    """What a run has spent so far: turns, tokens, dollars and model calls (a value that adds
    up with ``+``). ``cached_input_tokens`` is the part of ``input_tokens`` the provider read
    from its prompt cache."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0
    cached_input_tokens: int = 0

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.turns + other.turns,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
            self.model_calls + other.model_calls,
            self.cached_input_tokens + other.cached_input_tokens,
        )

    @classmethod
    def from_checkpoint(cls, cp: Checkpoint) -> Totals:
        """The totals ``cp`` recorded (an old checkpoint without cached tokens counts 0)."""
        return cls(
            cp.turns,
            cp.input_tokens,
            cp.output_tokens,
            cp.cost_usd,
            cp.model_calls,
            cp.cached_input_tokens,
        )

    @classmethod
    def of_call(cls, usage: Usage, cost_usd: float) -> Totals:
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
    ) -> Totals:
        """These totals plus one model call."""
        return self + Totals.of_call(
            Usage(input_tokens, output_tokens, cached_input_tokens), cost_usd
        )

    def add_turn(self) -> Totals:
        """These totals plus one executed turn."""
        return self + Totals(turns=1)


def _spend_exceeded(opts: RunOptions, totals: Totals) -> StopReason | None:
    if opts.max_input_tokens and totals.input_tokens >= opts.max_input_tokens:
        return StopReason.MAX_TOKENS_EXCEEDED
    if opts.max_output_tokens and totals.output_tokens >= opts.max_output_tokens:
        return StopReason.MAX_TOKENS_EXCEEDED
    if opts.max_cost_usd and totals.cost_usd >= opts.max_cost_usd:
        return StopReason.MAX_COST_EXCEEDED
    return None


def turn_budget(opts: RunOptions, totals: Totals, elapsed: float) -> StopReason | None:
    """The budget that forbids the next turn, checked in order: wall-clock, turns, input
    tokens, output tokens, cost. A zero cap is off."""
    if opts.max_wallclock and elapsed >= opts.max_wallclock:
        return StopReason.WALLCLOCK_EXCEEDED
    if opts.max_turns and totals.turns >= opts.max_turns:
        return StopReason.MAX_TURNS_EXCEEDED
    return _spend_exceeded(opts, totals)


def call_budget(opts: RunOptions, totals: Totals, elapsed: float) -> StopReason | None:
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
    opts: RunOptions, totals: Totals, *, input_tokens: int, most_cost_usd: float
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


def after_turn(
    *,
    error: BaseException | None,
    decision: RetryDecision | None,
    done: DoneSignal | None,
    schedule: ScheduleEvent | None,
    continuation_prompt: str,
) -> Step:
    """What follows a turn. A done signal wins over an error and over a schedule; an error goes
    by the retry policy's decision (none = abort); a schedule waits; else continue."""
    if done is not None:
        return Finish(StopReason.COMPLETED)
    if error is not None:
        if decision is RetryDecision.RETRY_TURN:
            return Retry()
        if decision is RetryDecision.SKIP_TURN:
            return Continue(continuation_prompt)
        return Finish(StopReason.RETRY_POLICY_ABORTED, error)
    if schedule is not None:
        return Wait(schedule, schedule.next_prompt or continuation_prompt)
    return Continue(continuation_prompt)


def clamp_wake(wake_at: datetime, now: datetime, max_defer: float) -> tuple[datetime, bool]:
    """``wake_at`` held to at most ``max_defer`` seconds after ``now`` (0 = no cap); True when
    clamped."""
    if max_defer and (wake_at - now).total_seconds() > max_defer:
        return now + timedelta(seconds=max_defer), True
    return wake_at, False


def status_for(reason: StopReason, stop_requested: bool) -> str:
    """The handle status a finished run reports."""
    if reason is StopReason.COMPLETED:
        return "completed"
    if reason is StopReason.DEFERRED:
        return "deferred"
    if reason is StopReason.CONTEXT_CANCELLED and stop_requested:
        return "stopped"
    return "failed"
