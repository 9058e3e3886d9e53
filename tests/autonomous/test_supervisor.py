"""The supervisor: decisions, snapshots, consult's fail-open, the rules and the LLM judge."""

from __future__ import annotations

import json
from typing import Any, cast

import anyio
import attrs
import pytest
import structlog

from autonomous._errors import ConfigurationError
from autonomous._models._litellm import LiteLLMModel
from autonomous._observe._judge import LLMJudge, parse_verdict, snapshot_json
from autonomous._observe._supervisor import (
    AbortRun,
    BudgetsLeft,
    PauseRun,
    Proceed,
    RecentEvents,
    RulesSupervisor,
    Steer,
    SupervisorDecision,
    SupervisorSnapshot,
    budgets_left,
    consult,
    steer_message,
)
from autonomous._options import RunOptions
from autonomous._progress import ModelCalled, ToolCalled, TurnFinished, TurnStarted
from autonomous._run._decide import Spending
from autonomous.testing import FakeClock, ScriptedModel, reply

pytestmark = pytest.mark.anyio


def snap(**fields: Any) -> SupervisorSnapshot:
    """A snapshot before turn 1 with ``fields`` changed."""
    return SupervisorSnapshot(turn=fields.pop("turn", 1), **fields)


class TestBudgetsLeft:
    def test_zero_caps_are_uncapped(self) -> None:
        """Every budget is None when no cap is set."""
        caps = RunOptions(max_turns=0)
        assert BudgetsLeft() == budgets_left(caps, Spending(3, 100, 50, 0.2), 12.0)

    def test_set_caps_show_what_is_left_never_below_zero(self) -> None:
        """Each cap minus its spending, floored at zero."""
        caps = RunOptions(
            max_turns=10,
            max_input_tokens=1000,
            max_output_tokens=40,
            max_cost_usd=1.0,
            max_wallclock=60,
        )
        left = budgets_left(caps, Spending(3, 100, 50, 0.25), 15.0)
        assert BudgetsLeft(7, 900, 0, 0.75, 45.0) == left


class TestRecentEvents:
    def test_keeps_only_the_newest_events(self) -> None:
        """A window of 50 keeps the last 50 events, oldest first."""
        window = RecentEvents()
        for turn in range(1, 61):
            window.record(TurnStarted(turn))
        assert tuple(TurnStarted(t) for t in range(11, 61)) == window.events

    def test_tool_errors_streak_until_an_ok_call(self) -> None:
        """Errors and timeouts add up; denied calls are neutral; an ok call resets."""
        window = RecentEvents()
        for outcome in ("error", "timeout", "denied", "error"):
            window.record(ToolCalled(1, "probe", outcome))
        assert 3 == window.consecutive_tool_errors
        window.record(ToolCalled(1, "probe", "ok"))
        assert 0 == window.consecutive_tool_errors

    def test_turn_errors_streak_until_a_good_turn(self) -> None:
        """Failed turns add up and name the last error; a good turn clears both."""
        window = RecentEvents()
        window.record(TurnFinished(1, 1, "ModelError"))
        window.record(TurnFinished(2, 1, "TurnTimeout"))
        assert (2, "TurnTimeout") == (window.consecutive_turn_errors, window.last_turn_error)
        window.record(TurnFinished(3, 1, None))
        assert (0, None) == (window.consecutive_turn_errors, window.last_turn_error)

    def test_snapshot_carries_totals_budgets_and_streaks(self) -> None:
        """The snapshot holds the spending, what is left and the window's state."""
        window = RecentEvents()
        window.record(ToolCalled(2, "probe", "error"))
        got = window.snapshot(
            3, caps=RunOptions(max_turns=5), spent=Spending(2, 30, 10, 0.1), elapsed=4.0
        )
        expected = SupervisorSnapshot(
            turn=3,
            turns_done=2,
            input_tokens=30,
            output_tokens=10,
            cost_usd=0.1,
            elapsed=4.0,
            budgets_left=BudgetsLeft(turns=3),
            recent_events=(ToolCalled(2, "probe", "error"),),
            consecutive_tool_errors=1,
        )
        assert expected == got


class TestSteerMessage:
    def test_frames_text_as_guidance(self) -> None:
        """The text is labelled as guidance that changes neither tools, outcomes nor task."""
        assert (
            "[Supervisor guidance] focus on Q4\n"
            "(This is guidance from your supervisor. It does not change your tools, "
            "your outcome set, or the task itself.)"
        ) == steer_message("  focus on Q4 ")


class TestConsult:
    async def test_returns_an_async_supervisors_decision(self) -> None:
        """An async callable's decision comes back unchanged."""

        async def supervisor(snapshot: SupervisorSnapshot) -> SupervisorDecision:
            return Steer(f"turn {snapshot.turn}")

        assert Steer("turn 4") == await consult(supervisor, snap(turn=4), timeout=1)

    async def test_accepts_a_sync_supervisor(self) -> None:
        """A plain function works too."""
        assert AbortRun("no") == await consult(lambda s: AbortRun("no"), snap(), timeout=1)

    async def test_none_means_proceed(self) -> None:
        """A supervisor with no opinion lets the run go on."""
        assert Proceed() == await consult(lambda s: None, snap(), timeout=1)

    async def test_a_raising_supervisor_fails_open(self) -> None:
        """An exception is logged by type and the run goes on (None)."""

        def supervisor(snapshot: SupervisorSnapshot) -> SupervisorDecision:
            raise RuntimeError("secret prompt text")

        with structlog.testing.capture_logs() as logs:
            assert None is await consult(supervisor, snap(), timeout=1)
        assert [("supervisor_failed", "RuntimeError")] == [(e["event"], e["error"]) for e in logs]
        assert "secret" not in repr(logs)

    async def test_a_hung_supervisor_times_out_and_fails_open(self) -> None:
        """A supervisor that never answers is cut off after the timeout."""

        clock, asked = FakeClock(), anyio.Event()
        decisions: list[SupervisorDecision | None] = []

        async def supervisor(snapshot: SupervisorSnapshot) -> SupervisorDecision:
            asked.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        async def ask() -> None:
            decisions.append(await consult(supervisor, snap(), timeout=30, clock=clock))

        # 30 s on the given clock: a timeout on real time would outlast the hang guard.
        with structlog.testing.capture_logs() as logs, anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                await asked.wait()
                clock.advance(30)
        assert [None] == decisions
        assert ["supervisor_timeout"] == [e["event"] for e in logs]

    async def test_a_wrong_return_type_fails_open(self) -> None:
        """A value that is not a decision is logged and ignored."""
        with structlog.testing.capture_logs() as logs:
            # A supervisor breaking its contract, on purpose: Any keeps mypy out of the way.
            assert None is await consult(cast(Any, lambda s: "abort"), snap(), timeout=1)
        assert [("supervisor_bad_decision", "str")] == [(e["event"], e["returned"]) for e in logs]

    async def test_the_callers_cancellation_propagates(self) -> None:
        """Cancelling the caller cancels the consult instead of failing open."""
        reached = False

        async def supervisor(snapshot: SupervisorSnapshot) -> SupervisorDecision:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        with anyio.move_on_after(0.01) as outer:
            await consult(supervisor, snap(), timeout=None)
            reached = True
        assert (True, False) == (outer.cancelled_caught, reached)


class TestRulesSupervisor:
    async def test_proceeds_when_no_rule_fires(self) -> None:
        """With every threshold unmet the decision is Proceed."""
        rules = RulesSupervisor(max_consecutive_tool_errors=3, abort_when_cost_above=1.0)
        assert Proceed() == await rules(snap(consecutive_tool_errors=2, cost_usd=1.0))

    def test_aborts_after_consecutive_tool_errors(self) -> None:
        """N consecutive tool errors abort the run."""
        rules = RulesSupervisor(max_consecutive_tool_errors=3)
        assert AbortRun("3 consecutive tool errors") == rules.decide(
            snap(consecutive_tool_errors=3)
        )

    def test_aborts_after_consecutive_turn_errors(self) -> None:
        """N consecutive failed turns abort the run, naming the last error."""
        rules = RulesSupervisor(abort_after_turn_errors=2)
        decision = rules.decide(snap(consecutive_turn_errors=2, last_turn_error="ModelError"))
        assert AbortRun("2 consecutive failed turns (last: ModelError)") == decision

    def test_aborts_once_cost_is_above_the_limit(self) -> None:
        """Cost above the abort threshold aborts."""
        rules = RulesSupervisor(abort_when_cost_above=0.5)
        assert isinstance(rules.decide(snap(cost_usd=0.51)), AbortRun)

    def test_abort_beats_pause(self) -> None:
        """When both cost thresholds are passed, the abort wins."""
        rules = RulesSupervisor(pause_when_cost_above=0.1, abort_when_cost_above=0.2)
        assert isinstance(rules.decide(snap(cost_usd=0.3)), AbortRun)

    def test_pauses_once_per_cost_crossing(self) -> None:
        """The cost pause fires on the first boundary above the threshold, not again after."""
        rules = RulesSupervisor(pause_when_cost_above=0.5)
        decisions = [rules.decide(snap(cost_usd=c)) for c in (0.4, 0.6, 0.7, 0.8)]
        assert [
            Proceed(),
            PauseRun("cost $0.6000 passed $0.5000"),
            Proceed(),
            Proceed(),
        ] == decisions

    def test_a_new_crossing_pauses_again(self) -> None:
        """Cost back at or below the threshold re-arms the pause."""
        rules = RulesSupervisor(pause_when_cost_above=0.5)
        decisions = [rules.decide(snap(cost_usd=c)) for c in (0.6, 0.1, 0.6)]
        assert [PauseRun, Proceed, PauseRun] == [type(d) for d in decisions]

    def test_custom_rules_run_in_order_after_the_built_ins(self) -> None:
        """The first custom rule with a decision wins; built-ins are checked first."""
        seen: list[str] = []

        def quiet(s: SupervisorSnapshot) -> SupervisorDecision | None:
            seen.append("quiet")
            return None

        def steer(s: SupervisorSnapshot) -> SupervisorDecision | None:
            seen.append("steer")
            return Steer("slow down")

        def never(s: SupervisorSnapshot) -> SupervisorDecision | None:
            seen.append("never")
            return AbortRun("no")

        rules = RulesSupervisor(max_consecutive_tool_errors=1, rules=[quiet, steer, never])
        assert Steer("slow down") == rules.decide(snap())
        assert ["quiet", "steer"] == seen
        assert AbortRun("1 consecutive tool errors") == rules.decide(
            snap(consecutive_tool_errors=1)
        )

    def test_a_rule_returning_a_non_decision_raises(self) -> None:
        """A broken rule is a TypeError (consult turns it into fail-open)."""
        rules = RulesSupervisor(rules=[lambda s: "pause"])  # type: ignore[list-item,return-value]
        with pytest.raises(TypeError):
            rules.decide(snap())

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"max_consecutive_tool_errors": 0},
            {"abort_after_turn_errors": -1},
            {"pause_when_cost_above": -0.1},
            {"abort_when_cost_above": float("nan")},
        ],
    )
    def test_rejects_nonsense_thresholds(self, kwargs: dict[str, Any]) -> None:
        """Thresholds below their minimum are a ConfigurationError at once."""
        with pytest.raises(ConfigurationError):
            RulesSupervisor(**kwargs)


class TestParseVerdict:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ('{"decision": "continue"}', Proceed()),
            ('{"decision": "steer", "message": "focus"}', Steer("focus")),
            ('{"decision": "pause", "reason": "costly"}', PauseRun("costly")),
            ('{"decision": "abort", "reason": "stuck"}', AbortRun("stuck")),
            ('{"decision": "ABORT"}', AbortRun("aborted by the LLM judge")),
            ('```json\n{"decision": "steer", "message": "focus"}\n```', Steer("focus")),
            ('Here you go: {"decision": "pause"} hope that helps', PauseRun("")),
        ],
    )
    def test_reads_each_decision(self, text: str, expected: SupervisorDecision) -> None:
        """Each decision word maps to its decision, fenced or wrapped in prose."""
        assert expected == parse_verdict(text)

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "continue",
            '{"decision": "maybe"}',
            '{"decision": "steer"}',
            '["continue"]',
            '{"decision": "continue"',
        ],
    )
    def test_nonsense_is_none(self, text: str) -> None:
        """Anything that is not a known decision object is None."""
        assert None is parse_verdict(text)


def judge_with(*answers: str, every: int = 5) -> tuple[LLMJudge, ScriptedModel]:
    """A judge over a scripted model giving ``answers``, then always continue."""
    model = ScriptedModel(
        [reply(a, input_tokens=100, output_tokens=7) for a in answers],
        default=reply('{"decision": "continue"}'),
    )
    return LLMJudge(model, every_n_turns=every), model


class TestLLMJudge:
    async def test_asks_the_model_only_every_n_turns(self) -> None:
        """Over turns 0..10 with N=5 the model is asked at 5 and 10 only."""
        judge, model = judge_with('{"decision": "steer", "message": "focus"}')
        decisions = [await judge(snap(turn=t + 1, turns_done=t)) for t in range(11)]
        assert 2 == model.requests
        assert Steer("focus") == decisions[5]
        assert [Proceed()] * 5 == decisions[:5]

    async def test_counts_its_own_usage(self) -> None:
        """Calls and tokens of the judge's model are added up."""
        judge, _ = judge_with('{"decision": "continue"}', '{"decision": "continue"}', every=1)
        await judge(snap(turns_done=1))
        await judge(snap(turns_done=2))
        assert (2, 200, 14) == (judge.calls, judge.input_tokens, judge.output_tokens)

    async def test_an_unparsable_answer_proceeds(self) -> None:
        """Prose instead of JSON is Proceed, logged without the text."""
        judge, _ = judge_with("I think it should stop, secret", every=1)
        with structlog.testing.capture_logs() as logs:
            assert Proceed() == await judge(snap(turns_done=1))
        assert ["supervisor_judge_unparsable"] == [e["event"] for e in logs]
        assert "secret" not in repr(logs)

    async def test_sends_role_and_content_free_snapshot(self) -> None:
        """The system prompt explains the role; the user message is the snapshot's JSON."""
        judge, model = judge_with('{"decision": "continue"}', every=1)
        judge.instructions = "Abort anything above one dollar."
        snapshot = snap(
            turns_done=1,
            recent_events=(ModelCalled(1, "m", 5, 2, 0.01, 1), ToolCalled(1, "t", "ok")),
        )
        await judge(snapshot)
        system, user = model.last_messages
        assert "supervise" in system["content"]
        assert system["content"].endswith("Abort anything above one dollar.")
        assert "Run snapshot: " + snapshot_json(snapshot) == user["content"]

    async def test_a_failing_model_raises_and_waits_n_turns(self) -> None:
        """A model error propagates (consult fails open) and the next ask is N turns later."""
        model = ScriptedModel([RuntimeError("down")], default=reply('{"decision": "abort"}'))
        judge = LLMJudge(model, every_n_turns=2)
        assert None is await consult(judge, snap(turns_done=2), timeout=1)
        assert Proceed() == await judge(snap(turns_done=3))
        assert AbortRun("aborted by the LLM judge") == await judge(snap(turns_done=4))

    def test_a_model_string_becomes_a_litellm_model(self) -> None:
        """A litellm model string is wrapped, completion keywords and all."""
        judge = LLMJudge("openai/gpt-4o-mini", api_base="http://127.0.0.1:1")
        assert isinstance(judge.model, LiteLLMModel)
        assert {"api_base": "http://127.0.0.1:1"} == dict(judge.model.completion_kwargs)

    def test_rejects_bad_settings(self) -> None:
        """A zero cadence or keywords with a Model object are ConfigurationErrors."""
        with pytest.raises(ConfigurationError):
            LLMJudge(ScriptedModel(), every_n_turns=0)
        with pytest.raises(ConfigurationError):
            LLMJudge(ScriptedModel(), temperature=0)


class TestSnapshotJson:
    def test_is_compact_json_of_numbers_and_event_types(self) -> None:
        """Events appear with their type name; floats are rounded; budgets None are null."""
        snapshot = snap(cost_usd=0.123456789, elapsed=3.14159, recent_events=(TurnStarted(1),))
        data = json.loads(snapshot_json(snapshot))
        assert [{"type": "TurnStarted", "turn": 1, "attempt": 1}] == data["recent_events"]
        assert (0.123457, 3.1) == (data["cost_usd"], data["elapsed"])
        assert attrs.asdict(BudgetsLeft()) == data["budgets_left"]
        assert " " not in snapshot_json(snapshot)
