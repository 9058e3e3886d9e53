"""SIGTERM of ``autonomous run`` and ``autonomous daemon``: the process exits promptly once its
sessions are handed back, whatever its tools and its store are doing (DESIGN item 25).

The spec's tool is a plain function that sleeps thirty seconds (the runtime runs it in a
worker thread, which cannot be killed: a stop abandons the call). The process must not wait
for such a thread to exit, and a store that does not answer (a SQLite file another process
holds a write lock on, a PostgreSQL session row another transaction holds) holds it no longer
than the run's last writes' time.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from autonomous._cli import _run as cli_run
from autonomous._cli._exits import Exit
from autonomous._run import _run as run_module
from autonomous.spec import load_spec
from eventlog import SessionKey

from ..autonomous.stores import DurableStore
from ..support.stuck_logs import StuckLog
from .conftest import ENV, Background, holder_of, session_events

#: The run's last writes' time, in seconds: a stop's bound on a store that does not answer.
LAST_WRITES = run_module._FINAL_WRITE_TIMEOUT
#: Seconds a prompt exit may take after SIGTERM: far less than the tool's thirty (a machine
#: shared with other work, a Python process's own exit).
PROMPT = 5.0

SPEC = """
name = "{name}"
app = "tests"
user = "tester"
model = "scripted:brains:{brain}"
goal = "Do the test thing."
instructions = "You are a test agent."
tools = ["brains:nap", "brains:offloaded_nap"]
{extra}
[budgets]
max_turns = 10
max_wallclock = 120
"""


def nap_spec(agent_dir: Path, brain: str = "napping_tool", *, extra: str = "") -> str:
    """Write ``nap.toml`` (an agent whose tool sleeps thirty seconds); its file name."""
    (agent_dir / "nap.toml").write_text(SPEC.format(name="nap", brain=brain, extra=extra))
    return "nap.toml"


def napping(agent_dir: Path, count: int = 1, timeout: float = 15) -> None:
    """Wait until ``count`` calls of the nap tool have begun in ``agent_dir``."""
    deadline = time.monotonic() + timeout
    while len(list(agent_dir.glob("napping.*"))) < count:
        assert time.monotonic() < deadline, "the nap tool never began"
        time.sleep(0.02)


def terminated(command: Background, timeout: float = 60) -> tuple[int, float]:
    """SIGTERM ``command``; its exit status and the seconds it took to exit."""
    began = time.monotonic()
    command.proc.send_signal(signal.SIGTERM)
    code = command.finish(timeout=timeout)
    return code, time.monotonic() - began


def checkpoints(agent_dir: Path, session: str) -> list[dict[str, Any]]:
    """The session's checkpoint events (as dicts), oldest first."""
    return [e for e in session_events(agent_dir, session) if e["kind"] == "checkpoint"]


def deferred_sessions(agent_dir: Path, *ids: str) -> None:
    """Start each session with ``run``: it defers (exits) at once, due a second later."""
    spec = nap_spec(agent_dir, "deferring_then_napping", extra='[scheduler]\nkind = "exit"\n')
    for session in ids:
        done = subprocess.run(
            [sys.executable, "-m", "autonomous", "run", spec, "--session", session, "-q"],
            cwd=agent_dir,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert Exit.DEFERRED == done.returncode, done.stderr


@contextmanager
def store_locked(store: DurableStore, session_id: str) -> Iterator[None]:
    """Every write to the session waits while the block runs: the SQLite file's write lock
    taken (``BEGIN IMMEDIATE``), or the PostgreSQL session row locked (``FOR UPDATE``), by
    a transaction of another connection, rolled back after the block."""
    if store.kind == "sqlite":
        conn = sqlite3.connect(store.target, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    with psycopg.connect(store.target) as pg:
        pg.execute(
            "SELECT sid FROM eventlog_sessions WHERE session_id = %s FOR UPDATE", (session_id,)
        )
        try:
            yield
        finally:
            pg.rollback()


class TestAbandonedToolThreads:
    """A sync tool still sleeping in its thread when the process is told to stop."""

    def test_run_exits_at_once_and_leaves_the_session_resumable(
        self, agent_dir: Path, start: Callable[..., Background], cli_store: DurableStore
    ) -> None:
        """SIGTERM while the tool sleeps: ``run`` writes its final checkpoint, lets the lease
        go and exits 143 within seconds, not when the tool's thread ends."""
        run = start(agent_dir, "run", nap_spec(agent_dir), "--session", "n1")
        napping(agent_dir)
        code, took = terminated(run)
        assert (Exit.SIGTERM, True) == (code, took < PROMPT), (took, run.lines["stderr"])
        last = checkpoints(agent_dir, "n1")[-1]["payload"]
        assert ("context_cancelled", False) == (last["stop_reason"], last.get("stopped", False))
        assert holder_of(agent_dir, "n1") is None

    def test_a_thread_the_tool_started_itself_does_not_hold_the_exit(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """An async tool that offloads its blocking work to anyio's worker threads (which
        are not daemons) and is abandoned by the stop does not hold the process either: once
        the command is done, ``run`` exits 143 at once, its output complete."""
        run = start(agent_dir, "run", nap_spec(agent_dir, "offloading"), "--session", "o1")
        napping(agent_dir)
        code, took = terminated(run)
        assert (Exit.SIGTERM, True) == (code, took < PROMPT), (took, run.lines)
        assert "next step autonomous resume tests/tester/o1" in run.stdout()
        assert "context_cancelled" == checkpoints(agent_dir, "o1")[-1]["payload"]["stop_reason"]

    def test_daemon_exits_at_once_and_hands_every_session_back(
        self, agent_dir: Path, start: Callable[..., Background], cli_store: DurableStore
    ) -> None:
        """A daemon running three sessions, each inside the thirty-second tool, hands them
        back on SIGTERM and exits 143 within seconds; each is due again, and free."""
        ids = ("d1", "d2", "d3")
        deferred_sessions(agent_dir, *ids)
        daemon = start(agent_dir, "daemon", "--poll", "0.2", "--json")
        napping(agent_dir, len(ids))
        code, took = terminated(daemon)
        assert (Exit.SIGTERM, True) == (code, took < PROMPT), (took, daemon.lines)
        for session in ids:
            last = checkpoints(agent_dir, session)[-1]
            assert ("deferred", "autonomous-daemon") == (
                last["payload"]["stop_reason"],
                last["author"],
            )
            assert holder_of(agent_dir, session) is None


class TestStoreThatDoesNotAnswer:
    """SIGTERM while every write of the session waits for another transaction's lock."""

    def test_run_exits_within_its_last_writes_time(
        self, agent_dir: Path, start: Callable[..., Background], cli_store: DurableStore
    ) -> None:
        """``run`` exits 143 within its last writes' time and a little, though the store
        did not take its final checkpoint in that time; it says so on standard error. (On
        PostgreSQL the write may still land once the lock goes, as after any timeout.)"""
        run = start(agent_dir, "run", nap_spec(agent_dir), "--session", "l1")
        napping(agent_dir)
        with store_locked(cli_store, "l1"):
            code, took = terminated(run)
        assert (Exit.SIGTERM, True) == (code, took < LAST_WRITES + PROMPT), (took, run.lines)
        assert 1 == run.count("final_checkpoint_not_written")


class TestSummaryAfterASignal:
    """The summary ``run`` and ``resume`` print after a signal is read from the store."""

    @pytest.mark.anyio
    async def test_a_store_that_does_not_answer_holds_it_no_longer_than_its_bound(
        self, in_process: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """After SIGTERM, a latest-checkpoint read the store never answers is given up after
        its bound (made 0.2 s here): the command still exits 143, its summary saying that it
        is incomplete, rather than waiting on."""
        monkeypatch.setattr(cli_run, "_SUMMARY_TIMEOUT", 0.2)
        log = StuckLog()
        log.stick()
        spec = load_spec(in_process / nap_spec(in_process))
        args = argparse.Namespace(json=True, utc=True)
        key = SessionKey("tests", "tester", "s1")
        with anyio.fail_after(0.2 + 2):
            code = await cli_run._finish(args, log, key, None, signal.SIGTERM, spec=spec)
        assert Exit.SIGTERM == code
        assert "the event log did not answer" in capsys.readouterr().err
