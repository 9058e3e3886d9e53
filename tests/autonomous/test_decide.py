"""The loop's pure decisions: budget order and arithmetic, the step after a turn, wake clamping.

Everything here runs without an event loop: the decisions are functions of values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from autonomous import AutonomousStatus, RetryDecision, StopReason
from autonomous._control._inbox import InboxMessage
from autonomous._options import RunOptions
from autonomous._run._decide import (
    Attempt,
    Continue,
    Finish,
    Next,
    Retry,
    Retrying,
    Seen,
    Spending,
    Step,
    TurnOutcome,
    Wait,
    budget_before_turn,
    call_budget,
    clamp_wake,
    late_messages_prompt,
    next_step,
    turn_budget,
    turn_prompt,
)
from autonomous._state._history import OpenTurn
from autonomous._state._run_state import Lifecycle, Meter, RunState, status_for
from autonomous._tools._exit_tools import DoneSignal
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
def totals(draw: st.DrawFn) -> Spending:
    """Random spending so far."""
    return Spending(draw(spent), draw(spent), draw(spent), draw(st.floats(0, 20)), draw(spent))


class TestTotals:
    @given(st.lists(st.tuples(spent, spent, st.floats(0, 1)), max_size=30))
    def test_adding_calls_sums_every_field(self, calls: list[tuple[int, int, float]]) -> None:
        """Spending after n calls are the field-wise sums and count n calls."""
        t = Spending()
        for i, o, c in calls:
            t = t.add_call(i, o, c)
        assert sum(i for i, _, _ in calls) == t.input_tokens
        assert sum(o for _, o, _ in calls) == t.output_tokens
        assert len(calls) == t.model_calls
        assert abs(sum(c for _, _, c in calls) - t.cost_usd) < 1e-9

    @given(totals())
    def test_a_turn_adds_one_turn_and_nothing_else(self, t: Spending) -> None:
        """add_turn changes turns only."""
        assert attrs.evolve(t, turns=t.turns + 1) == t.add_turn()


class TestTurnBudget:
    @given(options(), totals(), st.floats(0, 100))
    def test_the_reason_is_the_first_spent_cap_in_order(
        self, opts: RunOptions, t: Spending, elapsed: float
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
    def test_zero_caps_never_stop(self, t: Spending, elapsed: float) -> None:
        """With every cap at 0 nothing trips."""
        opts = RunOptions(max_turns=0)
        assert None is turn_budget(opts, t, elapsed)

    @given(options(), totals(), st.floats(0, 100))
    def test_a_call_budget_ignores_turns(
        self, opts: RunOptions, t: Spending, elapsed: float
    ) -> None:
        """Inside a turn the turn cap does not apply; the others do."""
        expected = turn_budget(attrs.evolve(opts, max_turns=0), t, elapsed)
        assert expected == call_budget(opts, t, elapsed)


NOW = datetime(2030, 1, 1, tzinfo=UTC)
SCHEDULE = ScheduleEvent(wake_at=NOW + timedelta(minutes=5), next_prompt="check again")


NOTHING = Spending()
JUST_NOW = Seen(NOW)


def state_of(totals: Spending = NOTHING, **changes: Any) -> RunState:
    """A run's state that has spent ``totals``, with ``changes``."""
    return attrs.evolve(RunState(Meter(totals), next_prompt="base"), **changes)


OPTS = RunOptions(max_turns=10, continuation_prompt="go on", done_tool_name="finish")
ATTEMPT = Attempt(turn=3, inbox_ids=("m1",), base_prompt="base")


def after(
    outcome: TurnOutcome,
    *,
    state: RunState | None = None,
    seen: Seen = JUST_NOW,
    opts: RunOptions = OPTS,
    attempt: Attempt = ATTEMPT,
) -> Next:
    """What next_step decides after ``outcome``."""
    return next_step(state or state_of(), outcome, attempt, seen, opts)


class TestNextStep:
    def test_done_beats_error_and_schedule(self) -> None:
        """A done signal completes the run even with an error and a schedule in the same turn."""
        outcome = TurnOutcome(done=DoneSignal("ok"), schedule=SCHEDULE, error=RuntimeError("x"))
        seen = Seen(NOW, decision=RetryDecision.RETRY_TURN)
        got = after(outcome, seen=seen)
        assert Finish(StopReason.COMPLETED) == got.step
        assert ("ok", 0, False) == (
            got.state.done_detail,
            got.state.failed_attempts,
            got.state.last_turn_failed,
        )

    def test_done_beats_a_cap(self) -> None:
        """A cap reached after the done call still completes the run."""
        got = after(TurnOutcome(done=DoneSignal(), cap=StopReason.MAX_COST_EXCEEDED))
        assert Finish(StopReason.COMPLETED) == got.step

    def test_errors_follow_the_decision(self) -> None:
        """Abort (or no policy) finishes, retry retries after its delay, skip continues."""
        failed = TurnOutcome(error=RuntimeError("x"))

        def step(decision: RetryDecision | None, delay: float = 0.0) -> Step:
            return after(failed, seen=Seen(NOW, decision=decision, delay=delay)).step

        assert Finish(StopReason.RETRY_POLICY_ABORTED) == step(None)
        assert Finish(StopReason.RETRY_POLICY_ABORTED) == step(RetryDecision.ABORT_RUN)
        assert Retry(2.5) == step(RetryDecision.RETRY_TURN, 2.5)
        assert Continue("go on") == step(RetryDecision.SKIP_TURN)

    def test_an_abort_carries_the_error_and_leaves_the_inbox_undelivered(self) -> None:
        """The error behind retry_policy_aborted goes into the result; the inbox stays."""
        error = RuntimeError("boom")
        got = after(TurnOutcome(error=error))
        assert isinstance(got.step, Finish) and error is got.step.error
        assert (False, False) == (got.deliver, got.checkpoint)
        assert ("RuntimeError: boom", 1) == (got.state.error, got.state.failed_attempts)

    def test_a_retry_keeps_the_turn_and_its_prompt(self) -> None:
        """A retried attempt keeps its turn, inbox and base prompt for the next attempt."""
        seen = Seen(NOW, decision=RetryDecision.RETRY_TURN)
        got = after(TurnOutcome(error=RuntimeError("x")), seen=seen)
        assert Retrying(3, ("m1",)) == got.state.retrying
        assert ("base", False, True) == (got.state.next_prompt, got.deliver, got.checkpoint)

    def test_a_cap_between_calls_ends_the_run(self) -> None:
        """A cap the attempt reached between two model calls finishes the run with it."""
        got = after(TurnOutcome(cap=StopReason.MAX_TOKENS_EXCEEDED))
        assert Finish(StopReason.MAX_TOKENS_EXCEEDED) == got.step
        assert (True, False) == (got.deliver, got.checkpoint)

    def test_a_schedule_waits_with_its_prompt(self) -> None:
        """A schedule becomes a Wait with the model's next prompt (or the continuation)."""
        assert Wait(SCHEDULE, "check again") == after(TurnOutcome(schedule=SCHEDULE)).step
        bare = ScheduleEvent(wake_at=NOW)
        got = after(TurnOutcome(schedule=bare))
        assert (Wait(bare, "go on"), "go on") == (got.step, got.state.next_prompt)

    def test_a_wake_past_max_defer_is_clamped(self) -> None:
        """The wake is held to max_defer ahead of now, and the asked-for wake is reported."""
        opts = attrs.evolve(OPTS, max_defer=60.0)
        got = after(TurnOutcome(schedule=SCHEDULE), opts=opts)
        assert isinstance(got.step, Wait)
        assert (NOW + timedelta(seconds=60), SCHEDULE.wake_at) == (
            got.step.schedule.wake_at,
            got.clamped_from,
        )

    def test_late_messages_earn_one_more_turn(self) -> None:
        """Messages that came after the done call, with budget left, get a turn of their own."""
        got = after(TurnOutcome(done=DoneSignal()), seen=Seen(NOW, waiting=True))
        assert Continue(late_messages_prompt("finish")) == got.step
        assert (True, True) == (got.state.finishing, got.checkpoint)

    def test_late_messages_without_budget_complete_the_run(self) -> None:
        """With no budget left for that turn, the run completes and the messages wait."""
        state = state_of(Spending(turns=10))
        got = after(TurnOutcome(done=DoneSignal()), state=state, seen=Seen(NOW, waiting=True))
        assert Finish(StopReason.COMPLETED) == got.step

    def test_the_turn_after_a_late_message_completes(self) -> None:
        """A finishing run completes after its next turn, whatever it did, unless retried."""
        state = state_of(finishing=True)
        assert Finish(StopReason.COMPLETED) == after(TurnOutcome(), state=state).step
        assert (
            Finish(StopReason.COMPLETED) == after(TurnOutcome(schedule=SCHEDULE), state=state).step
        )
        retried = Seen(NOW, decision=RetryDecision.RETRY_TURN)
        assert Retry() == after(TurnOutcome(error=OSError()), state=state, seen=retried).step

    def test_a_spent_budget_leaves_the_checkpoint_to_the_exit(self) -> None:
        """When no budget is left for the next turn, the exit's checkpoint closes this one."""
        assert False is after(TurnOutcome(), state=state_of(Spending(turns=10))).checkpoint
        assert True is after(TurnOutcome(), state=state_of(Spending(turns=9))).checkpoint


@st.composite
def outcomes(draw: st.DrawFn) -> TurnOutcome:
    """Anything an attempt can report (an error and a cap never together)."""
    ending = draw(st.sampled_from(["none", "error", "cap"]))
    schedule = draw(
        st.none() | st.integers(0, 10**5).map(lambda s: ScheduleEvent(NOW + timedelta(seconds=s)))
    )
    return TurnOutcome(
        text=draw(st.text(max_size=5)),
        done=draw(st.none() | st.builds(DoneSignal, st.text(max_size=5))),
        schedule=schedule,
        error=RuntimeError("x") if ending == "error" else None,
        cap=StopReason.MAX_COST_EXCEEDED if ending == "cap" else None,
    )


@st.composite
def seens(draw: st.DrawFn) -> Seen:
    """What the loop may find out around an attempt."""
    return Seen(
        NOW,
        elapsed=draw(st.floats(0, 100)),
        decision=draw(st.none() | st.sampled_from(RetryDecision)),
        delay=draw(st.sampled_from([0.0, 1.5])),
        waiting=draw(st.booleans()),
    )


@st.composite
def states(draw: st.DrawFn) -> RunState:
    """A run's state between turns."""
    return state_of(
        draw(totals()),
        finishing=draw(st.booleans()),
        failed_attempts=draw(st.integers(0, 5)),
        steer=draw(st.sampled_from(["", "steer"])),
    )


class TestNextStepProperties:
    @given(states(), outcomes(), seens(), options(), st.booleans())
    def test_the_rules_hold_for_any_attempt(
        self, state: RunState, outcome: TurnOutcome, seen: Seen, opts: RunOptions, inbox: bool
    ) -> None:
        """Done wins, failures count, retries keep their turn, the inbox is delivered unless
        retried or aborted, an exit writes the checkpoint, and wakes respect max_defer."""
        opts = attrs.evolve(opts, max_defer=600.0)
        attempt = Attempt(7, ("m",) if inbox else (), "base")
        got = next_step(state, outcome, attempt, seen, opts)
        new, step = got.state, got.step
        failed = outcome.error is not None and outcome.done is None
        if outcome.done is not None and not isinstance(step, Continue):
            assert Finish(StopReason.COMPLETED) == step
        if isinstance(step, Continue) and step.prompt == late_messages_prompt(opts.done_tool_name):
            assert seen.waiting and new.finishing
        assert (state.failed_attempts + 1 if failed else 0) == new.failed_attempts
        assert failed == new.last_turn_failed
        assert isinstance(step, Retry) == (new.retrying == Retrying(7, attempt.inbox_ids))
        if isinstance(step, Retry):
            assert failed and "base" == new.next_prompt
        assert (
            inbox and not isinstance(step, Retry) and not (failed and isinstance(step, Finish))
        ) == got.deliver
        if isinstance(step, Finish):
            assert not got.checkpoint
        if isinstance(step, Wait):
            assert step.schedule.wake_at <= NOW + timedelta(seconds=600)
        assert state.meter == new.meter
        if not failed:
            assert ("", "") == (new.steer, new.error)


class TestClampWake:
    @given(st.integers(1, 10**6), st.integers(0, 10**5))
    def test_clamped_wake_is_never_past_the_cap(self, ahead: int, cap: int) -> None:
        """The clamped wake is at most max_defer ahead, and untouched within it (0 = no cap)."""
        wake, clamped = clamp_wake(NOW + timedelta(seconds=ahead), NOW, cap)
        if cap and ahead > cap:
            assert (NOW + timedelta(seconds=cap), True) == (wake, clamped)
        else:
            assert (NOW + timedelta(seconds=ahead), False) == (wake, clamped)


class TestLifecycle:
    """The status a handle reports is derived from the run's lifecycle, never stored."""

    def test_a_new_run_is_running(self) -> None:
        """Nothing asked, nothing ended: running."""
        assert AutonomousStatus.RUNNING == Lifecycle().status

    def test_a_pause_takes_hold_once_the_loop_parks(self) -> None:
        """Asking for a pause changes nothing until the loop parks (or sleeps) while paused;
        the pause then holds until a resume, whether or not the loop is parked."""
        asked = Lifecycle().changed(paused=True)
        assert AutonomousStatus.RUNNING == asked.status
        parked = asked.changed(parked=True)
        assert AutonomousStatus.PAUSED == parked.status
        assert AutonomousStatus.PAUSED == parked.changed(parked=False).status
        assert AutonomousStatus.RUNNING == parked.changed(paused=False).status

    def test_a_stop_is_stopped_until_the_end_says_otherwise(self) -> None:
        """A stop reads stopped at once; the end's reason decides after it."""
        stopping = Lifecycle().changed(paused=True, parked=True, stop_requested=True)
        assert AutonomousStatus.STOPPED == stopping.status
        cancelled = stopping.changed(ended=StopReason.CONTEXT_CANCELLED)
        assert AutonomousStatus.STOPPED == cancelled.status
        assert AutonomousStatus.COMPLETED == stopping.changed(ended=StopReason.COMPLETED).status

    def test_a_lost_lease_is_running_until_the_run_ends_failed(self) -> None:
        """A lost lease stops the run; its end, lease_lost, reads failed."""
        lost = Lifecycle().changed(lease_lost=True)
        assert AutonomousStatus.RUNNING == lost.status
        assert AutonomousStatus.FAILED == lost.changed(ended=StopReason.LEASE_LOST).status

    @given(st.sampled_from(StopReason), st.booleans(), st.booleans())
    def test_the_end_and_a_failure_decide_the_status(
        self, reason: StopReason, stopped: bool, paused: bool
    ) -> None:
        """An ended run reports its reason's status; a failed one reports failed, always."""
        ended = Lifecycle(paused=paused, parked=paused, stop_requested=stopped, ended=reason)
        assert AutonomousStatus(status_for(reason, stopped)) == ended.status
        assert AutonomousStatus.FAILED == ended.changed(failure=RuntimeError()).status


class TestBeforeTurn:
    """What the loop decides before a turn: the budget that ends the run, the prompt."""

    @given(options(), totals(), st.floats(0, 100))
    def test_a_finishing_run_completes_on_any_budget(
        self, opts: RunOptions, t: Spending, elapsed: float
    ) -> None:
        """A run whose done tool was called ends completed when no budget is left for the
        turn that would deliver its late messages."""
        spent = turn_budget(opts, t, elapsed)
        expected = None if spent is None else StopReason.COMPLETED
        assert expected == budget_before_turn(opts, state_of(t, finishing=True), elapsed)

    def test_a_resumed_turn_counted_already_starts_none(self) -> None:
        """A resumed, unfinished turn is counted in the totals: max_turns does not stop it."""
        resumed = OpenTurn(
            turn=10, calls=(), first_index=0, inbox_ids=(), complete=False, answered=True
        )
        state = state_of(Spending(turns=10), resumed_turn=resumed)
        assert None is budget_before_turn(OPTS, state, 0.0)
        assert StopReason.MAX_TURNS_EXCEEDED == budget_before_turn(
            OPTS, state_of(Spending(turns=10)), 0.0
        )

    def test_the_prompt_is_steer_then_inbox_then_the_next_prompt(self) -> None:
        """Supervisor guidance comes first, then the inbox block, then the next prompt."""
        message = InboxMessage("m1", "hello", None, 1)
        assert "base" == turn_prompt(state_of(), ())
        assert "steer\n\n[Inbox]\n- hello\n\nbase" == turn_prompt(
            state_of(steer="steer"), (message,)
        )
