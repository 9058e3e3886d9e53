"""The library logs through the standard logging module unless the program configured structlog:
a program that sets up no logging sees nothing of it on standard output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: A plain asyncio program: a durable session on the scripted model, with a tool, a deferral
#: (the run exits deferred), then a resume that finishes; argv[1] says how it sets up logging.
PROGRAM = """
import asyncio, logging, sys

import structlog

from autonomous import Agent, function_tool, resume_autonomous, run_autonomous
from autonomous.testing import ScriptedModel, call, reply
from eventlog import SessionRef, SqliteEventLog
from scheduler import ExitOnDeferScheduler

if sys.argv[1] == "stdlib":
    logging.basicConfig(level=logging.INFO)
elif sys.argv[1] == "structlog":
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))


def check(n: int) -> int:
    \"\"\"Add one.\"\"\"
    return n + 1


async def main() -> None:
    async with SqliteEventLog(sys.argv[2]) as log:
        ref = SessionRef(log, "app", "ops", "s1")
        model = ScriptedModel([
            call("check", {"n": 1}),
            call("schedule_next_turn", {"wake_in_sec": 1, "next_prompt": "again"}),
            reply("later"),
            call("report_done", {"state": "done", "detail": "fine"}),
            reply("bye"),
        ])

        def build(tools, session_id=None):
            return Agent(model, session=ref, tools=[function_tool(check), *tools])

        first = await run_autonomous(build, "go", max_turns=5, scheduler=ExitOnDeferScheduler())
        print("first", first.reason)
        second = await resume_autonomous(build, ref, max_turns=5)
        print("second", second.reason)


asyncio.run(main())
"""


def run(tmp_path: Path, setup: str) -> subprocess.CompletedProcess[str]:
    """The program above, with ``setup`` logging, in a fresh interpreter."""
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    return subprocess.run(
        [sys.executable, str(script), setup, str(tmp_path / "runs.db")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class TestLibraryLogging:
    """Who sees the library's log events: nobody unasked, logging or structlog when set up."""

    def test_unconfigured_program_prints_only_its_own_lines(self, tmp_path: Path) -> None:
        """Without any logging set up, stdout holds exactly what the program printed."""
        done = run(tmp_path, "none")

        assert (0, "first deferred\nsecond completed\n") == (done.returncode, done.stdout)
        assert "run_started" not in done.stderr

    def test_logging_basic_config_gets_the_events(self, tmp_path: Path) -> None:
        """With logging.basicConfig(level=INFO) the events appear on stderr, with their fields."""
        done = run(tmp_path, "stdlib")

        assert (0, "first deferred\nsecond completed\n") == (done.returncode, done.stdout)
        assert "INFO:autonomous:run_started" in done.stderr
        assert "session='app/ops/s1'" in done.stderr

    def test_structlog_configured_program_gets_the_events(self, tmp_path: Path) -> None:
        """A program that configures structlog gets the events through its configuration."""
        done = run(tmp_path, "structlog")

        assert (0, "first deferred\nsecond completed\n") == (done.returncode, done.stdout)
        assert "run_started" in done.stderr
