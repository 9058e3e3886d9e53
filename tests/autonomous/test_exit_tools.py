"""The run's own tools as Go has them: a past wake_at wakes at once, and the descriptions say
when to use which tool."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from autonomous import Agent, StopReason, Tool, run_autonomous
from autonomous._tools._exit_tools import ExitTools
from autonomous._tools._tool_result import ToolOutcome
from autonomous.testing import FakeClock, ScriptedModel, call, done, reply
from scheduler import ExitOnDeferScheduler, ScheduleEvent, SleepScheduler

pytestmark = pytest.mark.anyio

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def control(
    clock: FakeClock | None = None, *, done_name: str = "report_done", schedule: bool = True
) -> ExitTools:
    """Control tools on ``clock`` (a fake one at START by default)."""
    return ExitTools(
        done_name=done_name,
        schedule_name="schedule_next_turn" if schedule else None,
        outcomes=(),
        result_schema=None,
        schedule_max_defer=0,
        clock=clock or FakeClock(START),
    )


def descriptions(tools: list[Tool]) -> dict[str, str]:
    """Each tool's description by name."""
    return {tool.name: tool.description for tool in tools}


class TestPastWakeAt:
    """A wake_at in the past wakes at once, and the model learns the current time."""

    def test_a_past_wake_at_is_accepted_and_wakes_now(self) -> None:
        """The schedule's wake time is now; the answer says so and gives the current time."""
        got = control().call(
            "schedule_next_turn", json.dumps({"wake_at": "2000-01-01T00:00:00Z"}), 1
        )
        answer = got.content
        assert ToolOutcome.OK == got.outcome
        assert isinstance(got.signal, ScheduleEvent) and START == got.signal.wake_at
        assert answer.startswith("acknowledged: wake_at 2000-01-01T00:00:00Z is in the past")
        assert "waking now" in answer
        assert "current time 2030-01-01T12:00:00Z" in answer

    def test_wake_at_now_wakes_now(self) -> None:
        """A wake_at equal to the current time is the same: wake at once."""
        got = control().call("schedule_next_turn", '{"wake_at": "2030-01-01T12:00:00Z"}', 1)
        assert isinstance(got.signal, ScheduleEvent) and START == got.signal.wake_at
        assert (True, ToolOutcome.OK) == (got.content.startswith("acknowledged: "), got.outcome)

    def test_every_acknowledgement_gives_the_current_time(self) -> None:
        """A future wake is acknowledged with the current time too (models get clocks wrong)."""
        answer = control().call("schedule_next_turn", '{"wake_in_sec": 90}', 1).content
        assert "next turn at 2030-01-01T12:01:30Z (in 90 s)" in answer
        assert "current time 2030-01-01T12:00:00Z" in answer

    @pytest.mark.parametrize(
        "raw", ['{"wake_in_sec": 0}', "[]", "{", '{"wake_at": "soon"}', '{"bogus": 1}']
    )
    def test_a_refused_call_is_rejected(self, raw: str) -> None:
        """A call the tool refuses comes back as ``rejected: ...`` with outcome REJECTED."""
        got = control().call("schedule_next_turn", raw, 1)
        assert (True, ToolOutcome.REJECTED) == (got.content.startswith("rejected: "), got.outcome)
        assert None is got.signal

    async def test_a_run_sleeps_not_at_all_and_goes_on(self) -> None:
        """Through a run: the sleep ends at once and the next turn starts at the same time."""
        clock = FakeClock(START)
        model = ScriptedModel(
            [
                call(
                    "schedule_next_turn",
                    {"wake_at": "1999-12-31T23:59:59Z", "next_prompt": "re-check"},
                ),
                reply("zz"),
                done("ok"),
                reply("bye"),
            ]
        )
        result = await run_autonomous(
            lambda extra: Agent(model, tools=extra),
            "go",
            scheduler=SleepScheduler(clock=clock),
            clock=clock,
        )
        assert (StopReason.COMPLETED, 2, START) == (result.reason, result.turns, clock.now())
        prompts = [m["content"] for m in model.last_messages if m["role"] == "user"]
        assert "re-check" in prompts[1]

    async def test_a_deferring_run_wakes_now(self) -> None:
        """With an exit-on-defer scheduler the run defers with next_wake_at = now."""
        clock = FakeClock(START)
        model = ScriptedModel(
            [call("schedule_next_turn", {"wake_at": "2000-01-01T00:00:00Z"}), reply("zz")]
        )
        result = await run_autonomous(
            lambda extra: Agent(model, tools=extra),
            "go",
            scheduler=ExitOnDeferScheduler(),
            clock=clock,
        )
        assert (StopReason.DEFERRED, START) == (result.reason, result.next_wake_at)


class TestDescriptions:
    """The default descriptions say when to call which tool, with the configured names."""

    def test_the_schedule_tool_names_the_done_tool_and_says_it_wins(self) -> None:
        """The schedule tool's description points to the configured done tool, which wins."""
        text = descriptions(control(done_name="finish").tools())["schedule_next_turn"]
        assert "finish" in text and "report_done" not in text
        assert "If you call both finish and schedule_next_turn in one turn, finish wins" in text

    def test_the_done_tool_is_offered_when_the_agent_cannot_proceed(self) -> None:
        """The done tool is also for an agent that cannot proceed, the reason in detail."""
        text = descriptions(control(schedule=False).tools())["report_done"]
        assert "cannot proceed any further" in text
        assert "detail" in text

    def test_the_done_tool_points_to_the_schedule_tool_when_there_is_one(self) -> None:
        """With a scheduler, the done tool says to schedule instead when there is more to do."""
        text = descriptions(control().tools())["report_done"]
        assert "schedule_next_turn" in text
        assert (
            "schedule_next_turn" not in descriptions(control(schedule=False).tools())["report_done"]
        )
