"""The history window: cut in blocks, a prefix that stays byte-stable, across a resume too."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from autonomous import (
    Agent,
    ConfigurationError,
    HistorySummarized,
    ModelCalled,
    ModelCalling,
    ModelResponse,
    StopReason,
    Tool,
    function_tool,
    resume_autonomous,
    run_autonomous,
    start_autonomous,
)
from autonomous._models import LiteLLMModel
from autonomous._options import make_options
from autonomous._state._history import window_start
from autonomous.testing import FakeClock, ScriptedModel
from autonomous.testing._server import ScriptedServer, Step, call, calls, error, reply
from eventlog import EventKind, HistorySummary, MemoryEventLog, SessionRef
from scheduler import ExitOnDeferScheduler, SleepScheduler

from ..support.litellm_http import API_KEY, MODEL
from .helpers import payloads
from .stores import DurableStore

pytestmark = pytest.mark.anyio

#: About 300 characters of readings, as a monitoring tool returns them.
READINGS = "; ".join(f"disk{i} /data{i} {40 + i}% used, inodes {10 + i}% used" for i in range(7))


async def check_disk(path: str) -> str:
    """Report the disk usage of path."""
    return f"{path}: {READINGS}"


def build_on(server: ScriptedServer, session: SessionRef | None) -> Callable[..., Agent]:
    """A build (and rebuild) of a monitoring agent on a litellm model pointed at ``server``."""

    def build(extra: list[Tool], session_id: str = "") -> Agent:
        return Agent(
            MODEL,
            instructions="Watch the disks.",
            tools=[function_tool(check_disk), *extra],
            session=session,
            api_base=server.api_base,
            api_key=API_KEY,
        )

    return build


def script_turns(server: ScriptedServer, turns: int, *, schedule: bool = False) -> None:
    """Each turn: one tool call (and a schedule when asked), then a short answer."""
    for n in range(turns):
        if schedule:
            server.push(
                calls([("check_disk", {"path": "/"}), ("schedule_next_turn", {"wake_in_sec": 60})])
            )
        else:
            server.push(call("check_disk", {"path": "/"}))
        server.push(reply(f"all fine {n}"))


def prefix_breaks(requests: list[dict[str, Any]]) -> list[int]:
    """The indices of the requests whose messages do not begin with the previous request's
    messages, byte for byte (as JSON)."""
    breaks = []
    for i in range(1, len(requests)):
        before, after = requests[i - 1]["messages"], requests[i]["messages"]
        if json.dumps(after[: len(before)]) != json.dumps(before):
            breaks.append(i)
    return breaks


def cut_turns(turns: int, window: int, keep: int) -> list[int]:
    """The turns at whose start the window is cut."""
    return [
        t
        for t in range(2, turns + 1)
        if window_start(t, window, keep) != window_start(t - 1, window, keep)
    ]


def assert_stable_outside_cuts(
    requests: list[dict[str, Any]], cuts: list[int], per_turn: int
) -> None:
    """Only the first request of a cut turn breaks the prefix; the system message and the tools
    never change."""
    assert [per_turn * (t - 1) for t in cuts] == prefix_breaks(requests)
    assert 1 == len({json.dumps(r["messages"][0]) for r in requests})
    assert 1 == len({json.dumps(r["tools"]) for r in requests})


class TestWindowStart:
    @given(st.integers(1, 500), st.integers(1, 60))
    def test_a_sliding_window_keeps_the_newest_turns(self, turn: int, window: int) -> None:
        """With keep == window, the window is the newest ``window`` turns, the current one too."""
        assert max(1, turn - window + 1) == window_start(turn, window, window)

    @given(st.integers(1, 500), st.integers(1, 60), st.integers(1, 60))
    def test_a_block_window_holds_between_keep_and_window_turns(
        self, turn: int, window: int, keep: int
    ) -> None:
        """Once full, a window holds at least ``keep`` and at most ``window`` turns; the newest
        turn is always in it and the start never goes back."""
        keep = min(keep, window)
        start = window_start(turn, window, keep)
        length = turn - start + 1
        assert 1 <= start <= turn
        assert length <= window
        assert turn <= window or length >= keep
        assert start >= window_start(turn - 1, window, keep) if turn > 1 else True

    def test_every_turn_is_kept_without_a_window(self) -> None:
        """history_turns=0 keeps every turn."""
        assert [1, 1, 1] == [window_start(t, 0, 0) for t in (1, 50, 10_000)]

    def test_a_full_window_is_cut_to_its_newest_block(self) -> None:
        """A window of 8 cut to 2 holds turns 1-8, then 8-9 at turn 9, grows to 8-15, cut at 16."""
        starts = [window_start(t, 8, 2) for t in range(1, 18)]
        assert [1] * 8 + [8] * 7 + [15, 15] == starts


class TestHistoryOptions:
    def test_the_default_is_blocks_cut_to_a_quarter(self) -> None:
        """The default window is 50 turns in blocks, cut to 13 (a quarter, rounded up)."""
        opts = make_options({})
        assert ("blocks", 50, 13) == (opts.history, opts.history_turns, opts.history_keep)

    def test_sliding_keeps_one_turn_per_turn(self) -> None:
        """history='sliding' cuts one turn at a time (keep == history_turns)."""
        assert 50 == make_options({"history": "sliding"}).history_keep

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"history": "rolling"}, "history must be 'blocks' or 'sliding'"),
            ({"history_keep_turns": 60}, "must not be more than history_turns=50"),
            ({"history_keep_turns": 5, "history": "sliding"}, "applies to history='blocks'"),
            ({"history_keep_turns": 5, "history_turns": 0}, "needs a window"),
            ({"history_summary_model": "m", "history_turns": 0}, "needs a window"),
            ({"history_summary_model": ""}, "history_summary_model must be"),
            ({"history_summary_model": 3}, "history_summary_model must be"),
        ],
    )
    def test_bad_history_options_are_refused(self, options: dict[str, Any], message: str) -> None:
        """A bad history option is a ConfigurationError that names it."""
        with pytest.raises(ConfigurationError, match=message):
            make_options(options)


class TestStablePrefix:
    async def test_consecutive_requests_share_their_prefix_between_cuts(
        self, scripted_server: ScriptedServer
    ) -> None:
        """Each request begins with the one before, byte for byte, except at a cut, where the
        system prompt and the tools still do not change."""
        script_turns(scripted_server, 20)
        build = build_on(scripted_server, None)
        result = await run_autonomous(build, "watch the disks", max_turns=20, history_turns=8)
        assert (StopReason.MAX_TURNS_EXCEEDED, 20) == (result.reason, result.turns)
        requests = scripted_server.requests
        assert [9, 16] == cut_turns(20, 8, 2)
        assert_stable_outside_cuts(requests, [9, 16], per_turn=2)

    async def test_a_sliding_window_breaks_the_prefix_every_turn_once_full(
        self, scripted_server: ScriptedServer
    ) -> None:
        """history='sliding' changes the prefix at every turn after the window filled."""
        script_turns(scripted_server, 12)
        build = build_on(scripted_server, None)
        await run_autonomous(build, "watch", max_turns=12, history_turns=8, history="sliding")
        assert_stable_outside_cuts(scripted_server.requests, list(range(9, 13)), per_turn=2)

    async def test_after_a_cut_the_goal_has_a_message_of_its_own(
        self, scripted_server: ScriptedServer
    ) -> None:
        """Once turn 1 is cut, the goal follows the unchanged system prompt, then the window's
        turns; the newest turn is always sent."""
        script_turns(scripted_server, 10)
        build = build_on(scripted_server, None)
        await run_autonomous(build, "watch the disks", max_turns=10, history_turns=8)
        last = scripted_server.requests[-1]["messages"]
        users = [m["content"] for m in last if m["role"] == "user"]
        assert {"role": "system", "content": "Watch the disks."} == last[0]
        assert users[0].startswith("[Goal of this run] watch the disks\n")
        assert ["continue", "continue", "continue"] == users[1:]  # turns 8, 9 and 10


@pytest.fixture(params=["memory", "sqlite"])
async def session(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """A session on the memory log or a SQLite file."""
    if request.param == "memory":
        yield SessionRef(MemoryEventLog(), "monitor", "ops", "disk-1")
        return
    async with DurableStore("sqlite", str(tmp_path / "runs.db")).open() as log:
        yield SessionRef(log, "monitor", "ops", "disk-1")


class TestStablePrefixAcrossResume:
    async def test_a_resumed_session_sends_what_the_live_run_would_have(
        self, scripted_server: ScriptedServer, session: SessionRef
    ) -> None:
        """A session deferred after every turn and resumed each time sends exactly the requests
        of one run that slept in between: same windows, same cuts, same bytes."""
        turns, window = 12, 6
        script_turns(scripted_server, turns, schedule=True)
        clock = FakeClock(autojump=True)
        live = build_on(scripted_server, None)
        options: dict[str, Any] = {"history_turns": window, "max_turns": turns}
        await run_autonomous(
            live, "watch", scheduler=SleepScheduler(clock=clock), clock=clock, **options
        )
        expected = scripted_server.requests
        scripted_server.reset()
        script_turns(scripted_server, turns, schedule=True)
        clock = FakeClock()
        build = build_on(scripted_server, session)
        deferred = {"scheduler": ExitOnDeferScheduler(), "clock": clock, **options}
        result = await run_autonomous(build, "watch", **deferred)
        while result.reason is StopReason.DEFERRED:
            clock.advance(60)
            result = await resume_autonomous(build, session, **deferred)
        assert (StopReason.MAX_TURNS_EXCEEDED, turns) == (result.reason, result.turns)
        assert [json.dumps(r) for r in expected] == [
            json.dumps(r) for r in scripted_server.requests
        ]
        assert_stable_outside_cuts(expected, cut_turns(turns, window, 2), per_turn=2)


def summary_model(server: ScriptedServer) -> LiteLLMModel:
    """A cheap summary model, on the same scripted server as the agent's model."""
    return LiteLLMModel("openai/cheap-model", api_base=server.api_base, api_key=API_KEY)


def script_with_summaries(
    server: ScriptedServer, turns: int, cuts: Mapping[int, Step], *, schedule: bool = False
) -> None:
    """:func:`script_turns`, with the summary call's answer ``cuts[t]`` before turn ``t``."""
    for t in range(1, turns + 1):
        if t in cuts:
            server.push(cuts[t])
        script_turns(server, 1, schedule=schedule)


class TestSummaries:
    async def test_a_cut_block_is_summarised_and_sent_after_the_goal(
        self, scripted_server: ScriptedServer
    ) -> None:
        """Before the cut at turn 9, the summary model summarises turns 1-7; the summary is an
        event of its own, sent after the goal, and its tokens count in the totals."""
        summary = reply("disks at 40-46%, nothing to do", input_tokens=900, output_tokens=30)
        script_with_summaries(scripted_server, 10, {9: summary})
        ref = SessionRef(MemoryEventLog(), "monitor", "ops", "s")
        result = await run_autonomous(
            build_on(scripted_server, ref),
            "watch the disks",
            max_turns=10,
            history_turns=8,
            history_summary_model=summary_model(scripted_server),
        )
        requests = scripted_server.requests
        asked = requests[16]
        last = requests[-1]["messages"]
        events = await payloads(ref, EventKind.HISTORY_SUMMARY, HistorySummary)
        assert ("cheap-model", []) == (asked["model"], asked.get("tools", []))
        assert "Turns 1-7, being removed now:" in asked["messages"][1]["content"]
        assert [(1, 7, 9, "disks at 40-46%, nothing to do")] == [
            (e.first_turn, e.last_turn, e.turn, e.text) for e in events
        ]
        assert "[Summary of turns 1-7] disks at 40-46%, nothing to do" == last[2]["content"]
        assert (20 * 10 + 900, 20 * 5 + 30) == (result.input_tokens, result.output_tokens)

    async def test_the_summary_call_is_in_the_progress_stream(
        self, scripted_server: ScriptedServer
    ) -> None:
        """A consumer sees the summary call begin and its usage and cost: with the answers'
        ModelCalled events they add up to the run's totals."""
        summary = reply("disks fine", input_tokens=900, output_tokens=30)
        script_with_summaries(scripted_server, 10, {9: summary})
        seen: list[Any] = []
        result = await run_autonomous(
            build_on(scripted_server, None),
            "watch the disks",
            max_turns=10,
            history_turns=8,
            history_summary_model=summary_model(scripted_server),
            progress=lambda turn, event: seen.append(event),
        )
        summarized = [e for e in seen if isinstance(e, HistorySummarized)]
        assert [HistorySummarized(9, "cheap-model", 1, 7, 900, 30, 0.0)] == summarized
        at = seen.index(summarized[0])
        assert ModelCalling(9, "openai/cheap-model") == seen[at - 1]
        calls = [e for e in seen if isinstance(e, ModelCalled | HistorySummarized)]
        assert (result.input_tokens, result.output_tokens) == (
            sum(e.input_tokens for e in calls),
            sum(e.output_tokens for e in calls),
        )

    async def test_summaries_are_folded_into_one(self, scripted_server: ScriptedServer) -> None:
        """The second summary is given the first and covers every cut turn; one is sent."""
        cuts = {9: reply("first summary"), 16: reply("both blocks")}
        script_with_summaries(scripted_server, 16, cuts)
        await run_autonomous(
            build_on(scripted_server, None),
            "watch",
            max_turns=16,
            history_turns=8,
            history_summary_model=summary_model(scripted_server),
        )
        second = scripted_server.requests[2 * 15 + 1]
        last = scripted_server.requests[-1]["messages"]
        assert "cheap-model" == second["model"]
        assert "Summary so far (turns 1-7):\nfirst summary" in second["messages"][1]["content"]
        assert ["[Summary of turns 1-14] both blocks"] == [
            m["content"] for m in last if (m.get("content") or "").startswith("[Summary")
        ]

    async def test_a_failed_summary_drops_the_block_and_the_run_goes_on(
        self, scripted_server: ScriptedServer
    ) -> None:
        """A summary call that fails is logged; the block is cut without a summary."""
        script_with_summaries(scripted_server, 10, {9: error(500)})
        ref = SessionRef(MemoryEventLog(), "monitor", "ops", "s")
        with capture_logs() as logs:
            result = await run_autonomous(
                build_on(scripted_server, ref),
                "watch",
                max_turns=10,
                history_turns=8,
                history_summary_model=summary_model(scripted_server),
            )
        last = scripted_server.requests[-1]["messages"]
        assert (StopReason.MAX_TURNS_EXCEEDED, 10) == (result.reason, result.turns)
        assert [] == await payloads(ref, EventKind.HISTORY_SUMMARY, HistorySummary)
        assert ["history_summary_failed"] == [
            e["event"] for e in logs if e["event"].startswith("history_summ")
        ]
        assert not any((m.get("content") or "").startswith("[Summary") for m in last)

    async def test_a_summary_that_outlives_the_per_turn_timeout_is_given_up(
        self, scripted_server: ScriptedServer
    ) -> None:
        """A summary model that never answers is given up after per_turn_timeout (on the
        run's clock), as a failed summary: the block is cut without one, the run goes on."""
        script_turns(scripted_server, 10)
        clock, asked = FakeClock(), anyio.Event()

        async def hang(messages: object, tools: object) -> ModelResponse:
            asked.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        ref = SessionRef(MemoryEventLog(), "monitor", "ops", "s")
        options: dict[str, Any] = {"max_turns": 10, "history_turns": 8, "per_turn_timeout": 30}
        with capture_logs() as logs, anyio.fail_after(10):
            async with start_autonomous(
                build_on(scripted_server, ref),
                "watch",
                history_summary_model=ScriptedModel([hang], name="cheap"),
                clock=clock,
                **options,
            ) as handle:
                await asked.wait()
                clock.advance(30)
                result = await handle.wait()
        assert (StopReason.MAX_TURNS_EXCEEDED, 10) == (result.reason, result.turns)
        assert [] == await payloads(ref, EventKind.HISTORY_SUMMARY, HistorySummary)
        assert [("history_summary_failed", "TurnTimeout")] == [
            (e["event"], e["error"]) for e in logs if e["event"].startswith("history_summ")
        ]

    async def test_a_resume_sends_the_summary_the_live_run_wrote(
        self, scripted_server: ScriptedServer, session: SessionRef
    ) -> None:
        """Deferred and resumed every turn, a summarised session sends exactly the requests of
        one run that slept: the summary is read back from the log, never written twice."""
        turns = 12
        options: dict[str, Any] = {"history_turns": 6, "max_turns": 12}
        cuts = {7: reply("summary of 1-5"), 12: reply("summary of 1-10")}
        script_with_summaries(scripted_server, turns, cuts, schedule=True)
        clock = FakeClock(autojump=True)
        summarizer = summary_model(scripted_server)
        await run_autonomous(
            build_on(scripted_server, None),
            "watch",
            scheduler=SleepScheduler(clock=clock),
            clock=clock,
            history_summary_model=summarizer,
            **options,
        )
        expected = scripted_server.requests
        scripted_server.reset()
        script_with_summaries(scripted_server, turns, cuts, schedule=True)
        clock = FakeClock()
        build = build_on(scripted_server, session)
        deferred: dict[str, Any] = {
            "scheduler": ExitOnDeferScheduler(),
            "clock": clock,
            "history_summary_model": summarizer,
            **options,
        }
        result = await run_autonomous(build, "watch", **deferred)
        while result.reason is StopReason.DEFERRED:
            clock.advance(60)
            result = await resume_autonomous(build, session, **deferred)
        assert [json.dumps(r) for r in expected] == [
            json.dumps(r) for r in scripted_server.requests
        ]
        assert 2 == sum(r["model"] == "cheap-model" for r in expected)


class TestSummaryBudget:
    async def test_a_summary_that_could_pass_the_token_cap_is_not_asked_for(
        self, scripted_server: ScriptedServer
    ) -> None:
        """Turns 1-7 as a summary request come to some 800 tokens; 160 are spent by turn 9
        and the cap is 600: the summary call could pass it, so it is not made (the block goes
        without one) and the run ends within the cap."""
        script_turns(scripted_server, 10)
        with capture_logs() as logs:
            result = await run_autonomous(
                build_on(scripted_server, None),
                "watch the disks",
                max_turns=10,
                history_turns=8,
                history_summary_model=summary_model(scripted_server),
                max_input_tokens=600,
            )
        assert [] == [r for r in scripted_server.requests if r["model"] == "cheap-model"]
        assert ["history_summary_skipped"] == [
            e["event"] for e in logs if e["event"].startswith("history_summary")
        ]
        assert (StopReason.MAX_TURNS_EXCEEDED, 200) == (result.reason, result.input_tokens)
