"""The loop's pure decisions: budget order and arithmetic, the step after a turn, wake clamping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
from hypothesis import given
from hypothesis import strategies as st

from autonomous import RetryDecision, StopReason
from autonomous._decide import (
    Continue,
    Finish,
    Retry,
    Step,
    Totals,
    Wait,
    after_turn,
    call_budget,
    clamp_wake,
    turn_budget,
)
from autonomous._exit_tools import DoneSignal
from autonomous._options import RunOptions
from scheduler import ScheduleEvent

caps = st.integers(min_value=0, max_value=1000)
spent = st.integers(min_value=0, max_value=2000)


@st.composite
def options(draw: st.DrawFn) -> RunOptions:
    """Options with random caps (0 = off)."""
    return RunOptions(
        max_turns=draw(caps),
        max_input_tokens=draw(caps),
        max_output_tokens=draw(caps),
        max_cost_usd=draw(st.sampled_from([0.0, 0.5, 1.0, 10.0])),
        max_wallclock=draw(st.sampled_from([0.0, 1.0, 60.0])),
    )


@st.composite
def totals(draw: st.DrawFn) -> Totals:
    """Random spending so far."""
    return Totals(draw(spent), draw(spent), draw(spent), draw(st.floats(0, 20)), draw(spent))


class TestTotals:
    @given(st.lists(st.tuples(spent, spent, st.floats(0, 1)), max_size=30))
    def test_adding_calls_sums_every_field(self, calls: list[tuple[int, int, float]]) -> None:
        """Totals after n calls are the field-wise sums and count n calls."""
        t = Totals()
        for i, o, c in calls:
            t = t.add_call(i, o, c)
        assert sum(i for i, _, _ in calls) == t.input_tokens
        assert sum(o for _, o, _ in calls) == t.output_tokens
        assert len(calls) == t.model_calls
        assert abs(sum(c for _, _, c in calls) - t.cost_usd) < 1e-9

    @given(totals())
    def test_a_turn_adds_one_turn_and_nothing_else(self, t: Totals) -> None:
        """add_turn changes turns only."""
        assert attrs.evolve(t, turns=t.turns + 1) == t.add_turn()


class TestTurnBudget:
    @given(options(), totals(), st.floats(0, 100))
    def test_the_reason_is_the_first_spent_cap_in_order(
        self, opts: RunOptions, t: Totals, elapsed: float
    ) -> None:
        """Wall-clock, turns, input tokens, output tokens, cost: the first spent cap wins."""
        order = [
            (opts.max_wallclock and elapsed >= opts.max_wallclock, StopReason.WALLCLOCK_EXCEEDED),
            (opts.max_turns and t.turns >= opts.max_turns, StopReason.MAX_TURNS_EXCEEDED),
            (
                opts.max_input_tokens and t.input_tokens >= opts.max_input_tokens,
                StopReason.MAX_TOKENS_EXCEEDED,
            ),
            (
                opts.max_output_tokens and t.output_tokens >= opts.max_output_tokens,
                StopReason.MAX_TOKENS_EXCEEDED,
            ),
            (opts.max_cost_usd and t.cost_usd >= opts.max_cost_usd, StopReason.MAX_COST_EXCEEDED),
        ]
        expected = next((reason for hit, reason in order if hit), None)
        assert expected == turn_budget(opts, t, elapsed)

    @given(totals(), st.floats(0, 1e6))
    def test_zero_caps_never_stop(self, t: Totals, elapsed: float) -> None:
        """With every cap at 0 nothing trips."""
        opts = RunOptions(max_turns=0)
        assert None is turn_budget(opts, t, elapsed)

    @given(options(), totals(), st.floats(0, 100))
    def test_a_call_budget_ignores_turns(self, opts: RunOptions, t: Totals, elapsed: float) -> None:
        """Inside a turn the turn cap does not apply; the others do."""
        expected = turn_budget(attrs.evolve(opts, max_turns=0), t, elapsed)
        assert expected == call_budget(opts, t, elapsed)


NOW = datetime(2030, 1, 1, tzinfo=UTC)
SCHEDULE = ScheduleEvent(wake_at=NOW + timedelta(minutes=5), next_prompt="check again")


class TestAfterTurn:
    def test_done_beats_error_and_schedule(self) -> None:
        """A done signal completes the run even with an error and a schedule in the same turn."""
        step = after_turn(
            error=RuntimeError("late"),
            decision=RetryDecision.RETRY_TURN,
            done=DoneSignal(),
            schedule=SCHEDULE,
            continuation_prompt="continue",
        )
        assert Finish(StopReason.COMPLETED) == step

    def test_errors_follow_the_decision(self) -> None:
        """Abort (or no policy) finishes, retry retries, skip continues."""
        err = RuntimeError("x")

        def after(decision: RetryDecision | None) -> Step:
            return after_turn(
                error=err, decision=decision, done=None, schedule=None, continuation_prompt="go on"
            )

        assert Finish(StopReason.RETRY_POLICY_ABORTED) == after(None)
        assert Retry() == after(RetryDecision.RETRY_TURN)
        assert Continue("go on") == after(RetryDecision.SKIP_TURN)

    def test_a_schedule_waits_with_its_prompt(self) -> None:
        """A schedule becomes a Wait with the model's next prompt (or the continuation)."""

        def after(schedule: ScheduleEvent) -> Step:
            return after_turn(
                error=None, decision=None, done=None, schedule=schedule, continuation_prompt="go on"
            )

        assert Wait(SCHEDULE, "check again") == after(SCHEDULE)
        bare = ScheduleEvent(wake_at=NOW)
        assert Wait(bare, "go on") == after(bare)


class TestClampWake:
    @given(st.integers(1, 10**6), st.integers(0, 10**5))
    def test_clamped_wake_is_never_past_the_cap(self, ahead: int, cap: int) -> None:
        """The clamped wake is at most max_defer ahead, and untouched within it (0 = no cap)."""
        wake, clamped = clamp_wake(NOW + timedelta(seconds=ahead), NOW, cap)
        if cap and ahead > cap:
            assert (NOW + timedelta(seconds=cap), True) == (wake, clamped)
        else:
            assert (NOW + timedelta(seconds=ahead), False) == (wake, clamped)
