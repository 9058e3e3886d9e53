"""Sessions tied to their spec file's path: a moved spec, a session started from Python."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .conftest import ENV, Background, cli, session_events, wait_until_due, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'

#: A session started from Python code, not by `autonomous run`: it defers itself, one second.
PYTHON_SESSION = """
import anyio
from autonomous import Agent, function_tool, run_autonomous
from eventlog import SessionRef, SqliteEventLog
from scheduler import ExitOnDeferScheduler
import brains


async def main() -> None:
    async with SqliteEventLog("autonomous.db") as log:
        ref = SessionRef(log=log, app="tests", user="tester", session_id="py1")

        def build(extra_tools):
            tools = [function_tool(brains.tick), *extra_tools]
            return Agent(brains.deferring(), instructions="A test agent.", session=ref, tools=tools)

        result = await run_autonomous(
            build, "Do the test thing.", scheduler=ExitOnDeferScheduler(), max_turns=10
        )
        print(result.reason.value)


anyio.run(main)
"""


def spec_notes(cwd: Path, session: str) -> list[str]:
    """The spec paths a session's spec notes record, oldest first."""
    return [
        e["payload"]["data"]["spec"]
        for e in session_events(cwd, session)
        if e["kind"] == "note" and "spec" in e["payload"].get("data", {})
    ]


def moved_session(agent_dir: Path, session: str) -> Path:
    """Run a deferring session from ``old/later.toml``, then move ``old`` to ``new``; returns
    the new spec path."""
    old = agent_dir / "old"
    old.mkdir()
    (agent_dir / "brains.py").rename(old / "brains.py")
    write_spec(old, "later", "deferring", extra=DEFERRING)
    ran = cli(agent_dir, "run", "old/later.toml", "--session", session, "-q")
    assert 10 == ran.returncode, ran.stderr
    old.rename(agent_dir / "new")
    wait_until_due(agent_dir)
    return agent_dir / "new" / "later.toml"


class TestMovedSpec:
    """A session whose spec file moved."""

    def test_resume_names_the_missing_spec_and_the_way_out(self, agent_dir: Path) -> None:
        """`resume` of a session whose spec moved fails (2) with the adopt hint."""
        moved_session(agent_dir, "m1")
        done = cli(agent_dir, "resume", "m1", "-q")
        assert 2 == done.returncode
        missing = agent_dir.resolve() / "old" / "later.toml"
        assert f"spec file {missing} is missing" in done.stderr, done.stderr
        assert "autonomous resume tests/tester/m1 --spec NEW_PATH" in done.stderr, done.stderr

    def test_resume_with_spec_adopts_the_moved_file(self, agent_dir: Path) -> None:
        """`resume --spec NEW` runs the session and records NEW for the next resume."""
        new = moved_session(agent_dir, "m2")
        done = cli(agent_dir, "resume", "m2", "--spec", "new/later.toml", "--json", "-q")
        assert 0 == done.returncode, done.stderr
        assert "completed" == json.loads(done.stdout)["reason"]
        assert str(new.resolve()) == spec_notes(agent_dir, "m2")[-1]

    def test_resume_refuses_a_spec_that_does_not_load(self, agent_dir: Path) -> None:
        """A --spec that does not load is a usage error (2), and nothing is recorded."""
        moved_session(agent_dir, "m3")
        (agent_dir / "bad.toml").write_text('name = "bad"\n')  # no model
        before = spec_notes(agent_dir, "m3")
        done = cli(agent_dir, "resume", "m3", "--spec", "bad.toml", "-q")
        assert 2 == done.returncode
        assert "bad.toml" in done.stderr and "model" in done.stderr, done.stderr
        assert before == spec_notes(agent_dir, "m3")

    def test_the_daemon_reports_a_missing_spec_once(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """The daemon says once which spec is missing and how to adopt it; no traceback."""
        moved_session(agent_dir, "m4")
        daemon = start(agent_dir, "daemon", "--poll", "0.2", "--json")
        line = json.loads(daemon.wait_for('"failed"', stream="stdout"))
        missing = agent_dir.resolve() / "old" / "later.toml"
        assert "tests/tester/m4" == line["session"]
        assert (
            f"spec file {missing} is missing: adopt it with "
            "autonomous resume tests/tester/m4 --spec NEW_PATH"
        ) == line["error"]
        # a second session, due a second later, is resumed polls after the first failure
        write_spec(agent_dir / "new", "later", "deferring", extra=DEFERRING)
        cli(agent_dir, "run", "new/later.toml", "--session", "ok", "-q")
        daemon.wait_for('"finished".*tests/tester/ok', stream="stdout")
        assert 1 == daemon.count('"failed"', stream="stdout")
        assert "Traceback" not in "\n".join(daemon.lines["stderr"])


class TestPythonSession:
    """A session started from Python code, adopted by the CLI."""

    def test_resume_with_spec_adopts_a_session_started_from_python(self, agent_dir: Path) -> None:
        """Without a spec note `resume` says how to adopt; with --spec it runs and records it."""
        (agent_dir / "start.py").write_text(PYTHON_SESSION)
        started = subprocess.run(
            [sys.executable, "start.py"],
            cwd=agent_dir,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert "deferred" == started.stdout.split()[-1], started.stderr  # after its logs
        refused = cli(agent_dir, "resume", "py1", "-q")
        assert 2 == refused.returncode
        assert "autonomous resume tests/tester/py1 --spec PATH" in refused.stderr, refused.stderr
        spec = write_spec(agent_dir, "later", "deferring", extra=DEFERRING)
        wait_until_due(agent_dir)
        done = cli(agent_dir, "resume", "py1", "--spec", "later.toml", "--json", "-q")
        assert 0 == done.returncode, done.stderr
        assert "completed" == json.loads(done.stdout)["reason"]
        assert [str(spec.resolve())] == spec_notes(agent_dir, "py1")
