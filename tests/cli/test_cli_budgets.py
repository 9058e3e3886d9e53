"""Budgets belong to the session: ``resume`` and the daemon pass only the command line's
overrides (the library records a change), or, for a session older than recorded budgets, the
spec's; never the spec's budgets over the session's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autonomous._cli._budgets import budgets_in_force, recorded_budgets, resume_options
from eventlog import Budgets, Checkpoint, Event, MemoryEventLog, SessionKey

from .conftest import cli, session_events, wait_until_due, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'
KEY = SessionKey("a", "u", "s")
#: What a spec's run_options hold: its budgets, and other options that are not budgets.
SPEC_OPTIONS: dict[str, Any] = {
    "max_turns": 400,
    "max_cost_usd": 1.0,
    "max_wallclock": 60.0,
    "per_turn_timeout": 30.0,
    "tool_timeout": 5.0,
}


class TestResumeOptions:
    """The options a resume passes, by the rule above (pure)."""

    def test_a_session_with_budgets_gets_none_of_the_specs(self) -> None:
        """Recorded budgets: the spec's budgets are left out, its other options kept."""
        recorded = Budgets(max_turns=2)
        assert {"per_turn_timeout": 30.0, "tool_timeout": 5.0} == resume_options(
            SPEC_OPTIONS, {}, recorded
        )

    def test_the_command_lines_overrides_are_passed(self) -> None:
        """--max-turns on resume: passed (the library records the change)."""
        options = resume_options(SPEC_OPTIONS, {"max_turns": 7}, Budgets(max_turns=2))
        assert {"max_turns": 7, "per_turn_timeout": 30.0, "tool_timeout": 5.0} == options

    def test_a_session_older_than_recorded_budgets_keeps_the_specs(self) -> None:
        """No recorded budgets: the spec's budgets (its cost cap) go with the resume."""
        assert {**SPEC_OPTIONS, "max_cost_usd": 0.5} == resume_options(
            SPEC_OPTIONS, {"max_cost_usd": 0.5}, None
        )

    def test_the_budgets_in_force_are_the_recorded_ones_with_the_overrides(self) -> None:
        """What the progress lines count down from and the price check looks at."""
        recorded = Budgets(max_turns=2, max_cost_usd=0.25)
        options = resume_options(SPEC_OPTIONS, {"max_turns": 7}, recorded)
        assert {
            "max_turns": 7,
            "max_input_tokens": 0,
            "max_output_tokens": 0,
            "max_cost_usd": 0.25,
            "max_wallclock": 0.0,
        } == budgets_in_force(recorded, options)
        assert {"max_turns": 400, "max_cost_usd": 1.0, "max_wallclock": 60.0} == (
            budgets_in_force(None, resume_options(SPEC_OPTIONS, {}, None))
        )


class TestRecordedBudgets:
    """Where the session's budgets are read from."""

    @pytest.mark.anyio
    async def test_the_newest_of_budgets_event_and_checkpoint(self) -> None:
        """A budgets event after the latest checkpoint (a change not yet checkpointed) wins;
        a checkpoint after it carries what is in force; none: None."""
        log = MemoryEventLog()
        assert await recorded_budgets(log, KEY) is None
        old = Checkpoint(1, 1, 1, 0.0, "p", "deferred")
        await log.append([Event.create(KEY, old)])
        assert await recorded_budgets(log, KEY) is None
        await log.append([Event.create(KEY, Budgets(max_turns=3))])
        assert Budgets(max_turns=3) == await recorded_budgets(log, KEY)
        newer = Checkpoint(2, 1, 1, 0.0, "p", "deferred", budgets=Budgets(max_turns=4))
        await log.append([Event.create(KEY, newer)])
        assert Budgets(max_turns=4) == await recorded_budgets(log, KEY)


def turns_of(agent_dir: Path, session: str) -> list[int]:
    """The turns the session's model was prompted for."""
    events = session_events(agent_dir, session)
    return [e["payload"]["turn"] for e in events if e["kind"] == "user_message"]


class TestOverridesAreKept:
    """End to end: these need the runtime to record budgets and go on under them."""

    def test_a_plain_resume_keeps_the_run_s_max_turns(self, agent_dir: Path) -> None:
        """run --max-turns 2 defers; a resume runs turn 2 and defers; the next resume stops
        at once, out of turns (not on the spec's 400)."""
        write_spec(agent_dir, "later", "always_deferring", extra=DEFERRING)
        ran = cli(agent_dir, "run", "later.toml", "--session", "t1", "--max-turns", "2", "-q")
        assert 10 == ran.returncode, ran.stderr
        wait_until_due(agent_dir)
        assert 10 == cli(agent_dir, "resume", "t1", "-q").returncode
        wait_until_due(agent_dir)
        done = cli(agent_dir, "resume", "t1", "--json", "-q")
        assert 11 == done.returncode, done.stderr
        assert ("max_turns_exceeded", 2) == (
            json.loads(done.stdout)["reason"],
            json.loads(done.stdout)["turns"],
        )
        assert [1, 2] == turns_of(agent_dir, "t1")

    def test_the_daemon_keeps_the_run_s_max_turns(self, agent_dir: Path) -> None:
        """run --max-turns 1 defers; the daemon's pass stops it out of turns, no turn run."""
        write_spec(agent_dir, "later", "always_deferring", extra=DEFERRING)
        ran = cli(agent_dir, "run", "later.toml", "--session", "t2", "--max-turns", "1", "-q")
        assert 10 == ran.returncode, ran.stderr
        wait_until_due(agent_dir)
        done = cli(agent_dir, "daemon", "--once", "--json")
        finished = [json.loads(line) for line in done.stdout.splitlines() if "finished" in line]
        assert ["max_turns_exceeded"] == [f["reason"] for f in finished], done.stdout
        assert [1] == turns_of(agent_dir, "t2")

    def test_a_resume_s_override_is_the_session_s_from_then_on(self, agent_dir: Path) -> None:
        """resume --max-turns 2 on a session run with --max-turns 1: it runs turn 2; the
        next plain resume stops out of turns; ls shows the new budget and none left."""
        write_spec(agent_dir, "later", "always_deferring", extra=DEFERRING)
        ran = cli(agent_dir, "run", "later.toml", "--session", "t3", "--max-turns", "1", "-q")
        assert 10 == ran.returncode, ran.stderr
        wait_until_due(agent_dir)
        assert 10 == cli(agent_dir, "resume", "t3", "--max-turns", "2", "-q").returncode
        wait_until_due(agent_dir)
        assert 11 == cli(agent_dir, "resume", "t3", "-q").returncode
        assert [1, 2] == turns_of(agent_dir, "t3")
        row = next(r for r in json.loads(cli(agent_dir, "ls", "--json").stdout))
        assert (2, 0) == (row["budgets"]["max_turns"], row["budgets_left"]["turns"])
