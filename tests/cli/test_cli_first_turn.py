"""A session killed in its first turn: listed, found by its short id, never started again as
new, resumed with its budgets, and every model call it made counted."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from .conftest import Background, cli, session_events, write_spec

HANGING_TOOLS = 'tools = ["brains:tick", "brains:hang"]'


def hanging_spec(agent_dir: Path) -> Path:
    """A spec whose model calls ``hang`` in its first turn."""
    path = write_spec(agent_dir, "hang", "hanging", max_turns=40)
    path.write_text(path.read_text().replace('tools = ["brains:tick"]', HANGING_TOOLS))
    return path


def wait_for_call(agent_dir: Path, session: str, tool: str, timeout: float = 20) -> None:
    """Wait until the session's log holds an answer asking for ``tool``."""
    deadline = time.monotonic() + timeout
    while True:
        events = (
            session_events(agent_dir, session) if (agent_dir / "autonomous.db").exists() else []
        )
        asked = [
            c["name"]
            for e in events
            if e["kind"] == "assistant_message"
            for c in e["payload"].get("tool_calls", ())
        ]
        if tool in asked:
            return
        assert time.monotonic() < deadline, events
        time.sleep(0.05)


class TestKilledInItsFirstTurn:
    def test_it_is_listed_refused_as_new_and_resumed_with_its_budgets(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """SIGKILL while turn 1's tool runs: ls lists it interrupted, show finds it by its
        short id, a second run of it is refused, and resume finishes it under the budget
        the first run was given, counting the crashed call."""
        spec = hanging_spec(agent_dir)
        run = start(agent_dir, "run", str(spec), "--session", "k6", "--max-turns", "5", "-q")
        wait_for_call(agent_dir, "k6", "hang")
        run.kill()

        listed = json.loads(cli(agent_dir, "ls", "--json").stdout)
        assert [("k6", "interrupted")] == [(s["session_id"], s["status"]) for s in listed]
        assert 0 == cli(agent_dir, "show", "k6").returncode

        again = cli(agent_dir, "run", str(spec), "--session", "k6")
        assert 2 == again.returncode
        assert "already exists" in again.stderr

        resumed = cli(agent_dir, "resume", "k6", "--json", "-q")
        assert 0 == resumed.returncode, resumed.stderr
        summary = json.loads(resumed.stdout)
        events = session_events(agent_dir, "k6")
        spent = sum(
            e["payload"].get("input_tokens", 0) for e in events if e["kind"] == "assistant_message"
        )
        assert ("completed", spent) == (summary["reason"], summary["input_tokens"])
        last = [e["payload"] for e in events if e["kind"] == "checkpoint"][-1]
        assert 5 == last["budgets"]["max_turns"]
        users = [e["payload"]["turn"] for e in events if e["kind"] == "user_message"]
        assert [1] == users  # the crashed turn went on: no second first turn
