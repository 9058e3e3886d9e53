"""Two processes at once: a run in one, ``inject``/``pause``/``unpause``/``stop`` from another,
on each store (SQLite, and PostgreSQL named by ``AUTONOMOUS_DB``).

The run watches its session's event log and obeys a remote request (within about a second;
how fast is measured in bench/, not asserted here).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Background, cli, session_events, write_spec

#: How long to wait for a run to obey a remote request before calling it a hang: far above
#: the second it takes, so a loaded machine does not fail the test (speed is bench/'s).
OBEY = 20.0


def looping_run(agent_dir: Path, start: Callable[..., Background], session: str) -> Background:
    """A run of the looping agent in a background process, past its first turn."""
    write_spec(agent_dir, "loop", "looping")
    run = start(agent_dir, "run", "loop.toml", "--session", session, "--json")
    run.wait_for(r"^turn 1 \|")
    return run


@pytest.mark.usefixtures("cli_store")  # on SQLite and on PostgreSQL
class TestRemoteControl:
    """A running session obeys requests sent from another process through the log."""

    def test_stop_from_another_process(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """`autonomous stop` ends the run context_cancelled, with its final checkpoint (and a
        second process cannot resume the session meanwhile: exit 3)."""
        run = looping_run(agent_dir, start, "r1")
        second = cli(agent_dir, "resume", "r1")
        assert (3, True) == (second.returncode, "is held by" in second.stderr), second.stderr
        sent = cli(agent_dir, "stop", "tests/tester/r1", "--as", "bob")
        assert 0 == sent.returncode, sent.stderr
        assert 15 == run.finish(timeout=OBEY)  # stopped
        result = json.loads(run.stdout())
        assert "context_cancelled" == result["reason"]
        events = session_events(agent_dir, "r1")
        controls = [e for e in events if e["kind"] == "control"]
        assert ("stop", "cli:bob") == (controls[0]["payload"]["action"], controls[0]["author"])
        assert "context_cancelled" == events[-1]["payload"].get("stop_reason")

    def test_inject_from_another_process(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """`autonomous inject` reaches the running agent's next turn; it finishes on it."""
        run = looping_run(agent_dir, start, "r2")
        assert 0 == cli(agent_dir, "inject", "r2", "wrap it up", "--as", "carol").returncode
        assert 0 == run.finish(timeout=OBEY)
        result = json.loads(run.stdout())
        assert "completed" == result["reason"]
        assert "(from carol) wrap it up" in result["done_detail"]

    def test_pause_and_unpause_from_another_process(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """`pause` parks the run at a turn boundary (no more turns); `unpause` lets it go on."""
        run = looping_run(agent_dir, start, "r3")
        assert 0 == cli(agent_dir, "pause", "r3").returncode
        run.wait_for(r"^paused before turn", timeout=OBEY)
        turns = run.count(r"^turn \d+ \|")
        # ls, another process, takes the time of several of the looping run's turns
        listed = json.loads(cli(agent_dir, "ls", "--json").stdout)
        assert "paused" == listed[0]["status"]  # a paused run says so in the log
        assert turns == run.count(r"^turn \d+ \|"), "a paused run went on with turns"
        assert None is run.proc.poll()
        assert 0 == cli(agent_dir, "unpause", "r3").returncode
        run.wait_for(r"^resumed before turn", timeout=OBEY)
        run.wait_for(rf"^turn {turns + 1} \|", timeout=OBEY)
        assert 0 == cli(agent_dir, "stop", "r3").returncode
        assert 15 == run.finish(timeout=OBEY)  # stopped
        assert "context_cancelled" == json.loads(run.stdout())["reason"]
