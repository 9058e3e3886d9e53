"""What ``ls`` says of each session: what a running one is doing now and since when, the error
behind a failed one, its budgets and what is left of them, and ``--json`` rows as rich as
``run --json``."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from autonomous._cli._show import describe
from autonomous._cli._view import Activity, activity_from
from eventlog import (
    AssistantMessage,
    Budgets,
    Checkpoint,
    Event,
    SessionKey,
    ToolCallRecord,
    ToolResult,
    UserMessage,
    utcnow,
)

from .conftest import append_events, cli, hold, write_spec

KEY = SessionKey("a", "u", "s")
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
BUDGETS = Budgets(max_turns=5, max_output_tokens=100, max_cost_usd=0.5, max_wallclock=60)


def at(seconds: float, payload: Any) -> Event:
    """An event of the session ``seconds`` after T0."""
    return Event.create(KEY, payload, at=T0 + timedelta(seconds=seconds))


def answer(*tools: str, model: str = "openai/gpt-4o-mini") -> AssistantMessage:
    """A model answer of turn 2 asking for ``tools``."""
    calls = tuple(ToolCallRecord(f"c{i}", name, "{}") for i, name in enumerate(tools))
    return AssistantMessage("", 2, calls, model=model)


def rows(cwd: Path) -> dict[str, dict[str, Any]]:
    """``ls --json``'s rows by session id."""
    done = cli(cwd, "ls", "--json")
    assert 0 == done.returncode, done.stderr
    return {row["session_id"]: row for row in json.loads(done.stdout)}


def line_of(cwd: Path, session: str) -> str:
    """The ``ls`` table's line of a session."""
    return next(line for line in cli(cwd, "ls").stdout.splitlines() if f"/{session} " in line)


class TestActivityFrom:
    """What a running session does, from its newest events."""

    def test_an_answer_with_tool_calls_means_its_tools_run(self) -> None:
        """After an answer asking for tools, the run is running them, since the answer."""
        events = [at(0, Checkpoint(1, 10, 5, 0.0, "go")), at(3, answer("check_disk", "df"))]
        assert Activity("running_tool", "running check_disk, df", T0 + timedelta(seconds=3)) == (
            activity_from(events)
        )

    def test_after_a_checkpoint_it_calls_the_model_it_called_last(self) -> None:
        """After a turn's checkpoint the run calls the model (named from its last answer)."""
        events = [at(1, answer()), at(2, Checkpoint(2, 10, 5, 0.0, "continue"))]
        calling = Activity("calling_model", "calling openai/gpt-4o-mini", T0 + timedelta(seconds=2))
        assert calling == activity_from(events)

    def test_tool_results_and_prompts_mean_a_model_call(self) -> None:
        """Tool results (or a prompt) as the newest event: the model is being called."""
        result = ToolResult("c0", "check_disk", "ok", 2)
        assert "calling_model" == activity_from([at(0, result)]).kind
        assert "calling the model" == activity_from([at(0, UserMessage("go", 2))]).text

    def test_a_sleep_says_until_when(self) -> None:
        """A checkpoint with a wake time and no stop reason: sleeping, since it, until the wake."""
        wake = T0 + timedelta(hours=1)
        events = [at(5, Checkpoint(2, 10, 5, 0.0, "wake up", next_wake_at=wake))]
        assert Activity("sleeping", "sleeping", T0 + timedelta(seconds=5), wake) == (
            activity_from(events)
        )

    def test_an_earlier_runs_end_is_not_what_the_run_does(self) -> None:
        """The previous run's deferred checkpoint: the new run waits for the wake time; any
        other earlier end: it is starting. Never the old stop reason."""
        wake = T0 + timedelta(hours=1)
        deferred = Checkpoint(2, 10, 5, 0.0, "wake up", "deferred", wake)
        assert Activity("waiting", "waiting", None, wake) == activity_from([at(0, deferred)])
        budget = Checkpoint(2, 10, 5, 0.0, "continue", "max_turns_exceeded")
        assert Activity("starting", "starting") == activity_from([at(0, budget)])
        assert Activity("starting", "starting") == activity_from([])

    def test_a_failed_attempt_is_retried_with_its_error(self) -> None:
        """A failed turn's checkpoint: the turn is being retried, after that error."""
        failed = Checkpoint(2, 10, 5, 0.0, "go", turn_failed=True, error="TimeoutError: slow")
        assert "retrying turn 3 after TimeoutError: slow" == activity_from([at(0, failed)]).text

    def test_a_paused_run_is_paused(self) -> None:
        """A paused run (its checkpoint, or its summary) is paused, since the checkpoint."""
        cp = Checkpoint(2, 10, 5, 0.0, "go", paused=True)
        assert Activity("paused", "paused", T0) == activity_from([at(0, cp)])
        assert "paused" == activity_from([at(0, answer("x"))], paused=True).kind


class TestRunningSessions:
    """A session a live process holds, through the command."""

    def test_ls_says_what_it_does_and_never_the_last_runs_stop_reason(
        self, agent_dir: Path
    ) -> None:
        """A resumed session (its last checkpoint deferred) that runs a tool now: the DETAIL
        cell says which tool and for how long; ls --json has no stop reason for it."""
        earlier = utcnow() - timedelta(minutes=5)
        deferred = Checkpoint(1, 10, 5, 0.0, "wake up", "deferred", earlier)
        append_events(agent_dir, "r1", deferred, at=earlier)
        holder = hold(agent_dir, "r1")
        append_events(agent_dir, "r1", answer("check_disk"), at=utcnow() - timedelta(seconds=90))
        row = rows(agent_dir)["r1"]
        assert ("running", holder, None) == (row["status"], row["holder"], row["stop_reason"])
        assert ("running_tool", "running check_disk") == (
            row["activity"]["kind"],
            row["activity"]["text"],
        )
        line = line_of(agent_dir, "r1")
        assert "running check_disk for 1m 3" in line, line  # 1m 30s, give or take a second
        assert "deferred" not in line

    def test_a_sleeping_session_says_for_how_long_and_when_it_wakes(self, agent_dir: Path) -> None:
        """A run sleeping (its checkpoint has a wake time, no stop reason): the DETAIL cell
        says for how long it has slept and when it wakes, relative and absolute."""
        wake = utcnow() + timedelta(minutes=10)
        slept = Checkpoint(1, 10, 5, 0.0, "wake up", next_wake_at=wake)
        append_events(agent_dir, "s1", slept, at=utcnow() - timedelta(seconds=65))
        hold(agent_dir, "s1")
        line = line_of(agent_dir, "s1")
        assert re.search(r"sleeping for 1m 0\ds, wakes in (9m 5\ds|10m 00s) \(", line), line

    def test_a_session_at_rest_has_no_activity(self, agent_dir: Path) -> None:
        """A session nobody holds shows its stop reason in DETAIL, and no activity."""
        append_events(agent_dir, "q1", Checkpoint(1, 10, 5, 0.0, "", "completed"))
        assert rows(agent_dir)["q1"]["activity"] is None
        assert " completed " in line_of(agent_dir, "q1")


class TestRichRows:
    """``ls --json`` carries what ``run --json`` does, and the budgets."""

    def test_a_failed_session_carries_its_error(self, agent_dir: Path) -> None:
        """The latest checkpoint's error is the row's error; its other fields too."""
        failed = Checkpoint(
            3,
            120,
            45,
            0.25,
            "go",
            "retry_policy_aborted",
            error="RuntimeError: the disk tool broke",
            budgets=BUDGETS,
        )
        append_events(agent_dir, "f1", failed)
        row = rows(agent_dir)["f1"]
        assert "RuntimeError: the disk tool broke" == row["error"]
        assert (45, None, "") == (row["output_tokens"], row["outcome"], row["done_detail"])

    def test_budgets_and_what_is_left(self, agent_dir: Path) -> None:
        """The recorded budgets (0: no cap) and what is left of each after the totals: None
        for one with no cap, 0 at most for one spent; the wall-clock cap only (it is per run)."""
        done = Checkpoint(
            3,
            120,
            130,
            0.125,
            "",
            "completed",
            done_detail="disk fine",
            outcome="calm",
            result={"used": 0.5},
            final_text="bye",
            budgets=BUDGETS,
        )
        append_events(agent_dir, "b1", done)
        row = rows(agent_dir)["b1"]
        assert {
            "max_turns": 5,
            "max_input_tokens": 0,
            "max_output_tokens": 100,
            "max_cost_usd": 0.5,
            "max_wallclock": 60.0,
        } == row["budgets"]
        assert {"turns": 2, "input_tokens": None, "output_tokens": 0, "cost_usd": 0.375} == (
            row["budgets_left"]
        )
        assert ("calm", {"used": 0.5}, "disk fine", "bye", None) == (
            row["outcome"],
            row["result"],
            row["done_detail"],
            row["final_text"],
            row["error"],
        )

    def test_a_session_from_before_budgets_were_recorded(self, agent_dir: Path) -> None:
        """No recorded budgets: null, not invented."""
        append_events(agent_dir, "o1", Checkpoint(1, 10, 5, 0.0, "", "completed"))
        row = rows(agent_dir)["o1"]
        assert (None, None) == (row["budgets"], row["budgets_left"])


def test_every_field_of_run_json_is_in_ls_json(agent_dir: Path) -> None:
    """ls --json has every field run --json has (but the run's own duration), same values."""
    write_spec(agent_dir, "quick", "quick")
    done = cli(agent_dir, "run", "quick.toml", "--session", "j1", "--json", "-q")
    ran = json.loads(done.stdout)
    row = rows(agent_dir)["j1"]
    fields = set(ran) - {"duration", "reason"}
    assert {k: ran[k] for k in fields} == {k: row[k] for k in fields}
    assert ran["reason"] == row["stop_reason"]


class TestShow:
    """``show`` opens with the session's status, budgets and error (``ls --json`` gives them
    as data; ``show --json`` the events as stored)."""

    def test_a_failed_session(self, agent_dir: Path) -> None:
        """Its status with the stop reason, each budget with what is used and left, the error;
        then the timeline."""
        failed = Checkpoint(
            3,
            1_200,
            45,
            0.125,
            "go",
            "retry_policy_aborted",
            error="RuntimeError: the disk tool broke",
            budgets=BUDGETS,
        )
        append_events(agent_dir, "f1", failed)
        lines = cli(agent_dir, "show", "f1").stdout.splitlines()
        assert [
            "session tests/tester/f1: 1 event",
            "status    failed (retry_policy_aborted)",
            "budgets   3 of 5 turns (2 left), 45 of 100 output tokens (55 left),"
            " $0.125000 of $0.500000 ($0.375000 left), 1m 00s of wall-clock per run",
            "error     RuntimeError: the disk tool broke",
        ] == lines[:4]
        assert "checkpoint" in lines[4]
        (row,) = json.loads(cli(agent_dir, "ls", "--json").stdout)
        assert ("failed", "RuntimeError: the disk tool broke") == (row["status"], row["error"])
        assert {"turns": 2, "input_tokens": None, "output_tokens": 55, "cost_usd": 0.375} == (
            row["budgets_left"]
        )
        shown = json.loads(cli(agent_dir, "show", "f1", "--json").stdout)
        assert ["checkpoint"] == [e["kind"] for e in shown]
        assert "RuntimeError: the disk tool broke" == shown[-1]["payload"]["error"]

    def test_a_running_session(self, agent_dir: Path) -> None:
        """A held session: what it does now, since when; no error of an earlier run."""
        earlier = Checkpoint(1, 10, 5, 0.0, "go", "retry_policy_aborted", error="OSError: x")
        append_events(agent_dir, "r2", earlier, at=utcnow() - timedelta(minutes=5))
        hold(agent_dir, "r2")
        append_events(agent_dir, "r2", answer("df"), at=utcnow() - timedelta(seconds=5))
        lines = cli(agent_dir, "show", "r2").stdout.splitlines()
        assert lines[1].startswith("status    running: running df for "), lines
        assert not any(line.startswith("error") for line in lines), lines

    def test_a_session_from_before_budgets_were_recorded(self, agent_dir: Path) -> None:
        """No budgets recorded: it says so."""
        append_events(agent_dir, "o2", Checkpoint(1, 10, 5, 0.0, "", "completed"))
        assert "budgets   none recorded" in cli(agent_dir, "show", "o2").stdout


class TestTimelineWords:
    """How the timeline says a budgets event and a failed checkpoint."""

    def test_a_budgets_event_names_each_cap(self) -> None:
        """The caps that are set, in words; none set: no caps."""
        assert "budgets: 5 turns, 100 output tokens, $0.5, 1m 00s of wall-clock per run" == (
            describe(BUDGETS)
        )
        assert "budgets: no caps" == describe(Budgets())

    def test_a_checkpoint_says_its_error(self) -> None:
        """A checkpoint with an error ends with it, quoted."""
        cp = Checkpoint(3, 10, 5, 0.0, "", "retry_policy_aborted", error="OSError: disk gone")
        assert describe(cp).endswith('error="OSError: disk gone"'), describe(cp)
