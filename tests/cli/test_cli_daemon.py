"""``autonomous daemon``: resumes due sessions, survives its own restart, never runs a held one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from .conftest import ENV, Background, cli, holder_of, session_events, wait_until_due, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'


def deferred_sessions(agent_dir: Path, *ids: str, brain: str = "deferring") -> None:
    """Run the deferring agent once per id, at once: each session exits deferred, due in 1 s."""
    write_spec(agent_dir, "later", brain, extra=DEFERRING)
    command = [sys.executable, "-m", "autonomous", "run", "later.toml", "--json", "-q"]
    runs = [
        subprocess.Popen(
            [*command, "--session", session],
            cwd=agent_dir,
            env=ENV,
            stdout=subprocess.PIPE,
            text=True,
        )
        for session in ids
    ]
    for run in runs:
        out, _ = run.communicate(timeout=15)
        assert "deferred" == json.loads(out)["reason"]


def assert_ran_once(agent_dir: Path, session: str) -> None:
    """The session completed exactly once, and its second turn ran exactly once."""
    events = session_events(agent_dir, session)
    stops = [e["payload"].get("stop_reason") for e in events if e["kind"] == "checkpoint"]
    assert 1 == stops.count("completed"), stops
    turns = [e["payload"]["turn"] for e in events if e["kind"] == "user_message"]
    assert [1, 2] == turns


def wait_until_completed(agent_dir: Path, ids: Sequence[str], timeout: float = 10) -> None:
    """Wait until every session's latest checkpoint says completed."""
    deadline = time.monotonic() + timeout
    while True:
        latest = [
            [e for e in session_events(agent_dir, s) if e["kind"] == "checkpoint"][-1] for s in ids
        ]
        if all(cp["payload"].get("stop_reason") == "completed" for cp in latest):
            return
        assert time.monotonic() < deadline, latest
        time.sleep(0.2)


def daemon_reports(daemon: Background) -> list[dict[str, Any]]:
    """The daemon's --json report lines so far."""
    return [json.loads(line) for line in daemon.stdout().splitlines() if line.startswith("{")]


class TestDaemon:
    """The orchestrator."""

    def test_resumes_a_session_when_it_becomes_due(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """A deferred session is resumed once its wake time comes, and completes."""
        daemon = start(agent_dir, "daemon", "--poll", "0.2", "--json")
        daemon.wait_for('"daemon_started"', stream="stdout")
        deferred_sessions(agent_dir, "d1")  # becomes due while the daemon runs
        daemon.wait_for('"finished".*"reason": "completed"', stream="stdout", timeout=8)
        assert_ran_once(agent_dir, "d1")
        events = session_events(agent_dir, "d1")
        deferred = next(e for e in events if e["payload"].get("stop_reason") == "deferred")
        wake = datetime.fromisoformat(deferred["payload"]["next_wake_at"])
        second = next(
            e for e in events if e["kind"] == "user_message" and e["payload"]["turn"] == 2
        )
        assert datetime.fromisoformat(second["at"]) >= wake, "resumed before the wake time"
        daemon.proc.send_signal(signal.SIGINT)
        assert 130 == daemon.finish()

    @pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
    def test_restart_while_sessions_are_due(
        self, agent_dir: Path, start: Callable[..., Background], how: str
    ) -> None:
        """A daemon killed while holding due sessions is replaced; each session runs once."""
        ids = ("a", "b", "c")
        deferred_sessions(agent_dir, *ids)
        first = start(agent_dir, "daemon", "--poll", "1", "--json")
        for session in ids:
            first.wait_for(f'"resuming".*tests/tester/{session}"', stream="stdout", timeout=5)
        first.proc.send_signal(getattr(signal, how))
        first.finish()
        second = start(agent_dir, "daemon", "--poll", "0.2", "--json")
        wait_until_completed(agent_dir, ids)
        for session in ids:
            assert_ran_once(agent_dir, session)
        resumed = [r["session"] for r in daemon_reports(second) if r["event"] == "resuming"]
        assert len(resumed) == len(set(resumed)), resumed
        finished = [
            r["session"]
            for r in daemon_reports(first) + daemon_reports(second)
            if r["event"] == "finished"
        ]
        assert len(finished) == len(set(finished)), finished

    def test_never_runs_a_session_another_process_holds(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """While `resume` holds a due session, the daemon leaves it alone.

        The holder keeps the session (due, and not finished) until an inject tells it to
        finish, so however slowly each command starts, the daemon runs beside the holder.
        """
        deferred_sessions(agent_dir, "held", brain="deferring_then_looping")
        holder = start(agent_dir, "resume", "held", "--json")
        holder.wait_for("resuming session")
        deadline = time.monotonic() + 10
        while holder_of(agent_dir, "held") is None:  # the lease is taken just after that line
            assert time.monotonic() < deadline, "resume never took the lease"
            time.sleep(0.05)
        daemon = start(agent_dir, "daemon", "--poll", "0.2", "--json")
        daemon.wait_for('"daemon_started"', stream="stdout", timeout=30)
        once = cli(agent_dir, "daemon", "--once", "--json")  # one whole pass while it is held
        assert "tests/tester/held" not in once.stdout, once.stdout
        assert holder_of(agent_dir, "held") is not None, "the holder let go too soon"
        assert 0 == cli(agent_dir, "inject", "held", "finish now").returncode
        assert 0 == holder.finish(timeout=30)
        assert "completed" == json.loads(holder.stdout())["reason"]
        # Started, its signal handlers are in place: SIGTERM is a clean stop (128 + 15).
        daemon.proc.send_signal(signal.SIGTERM)
        assert 128 + signal.SIGTERM == daemon.finish()
        assert [] == [r for r in daemon_reports(daemon) if r.get("session") == "tests/tester/held"]
        events = session_events(agent_dir, "held")
        stops = [e["payload"].get("stop_reason") for e in events if e["kind"] == "checkpoint"]
        turns = [e["payload"]["turn"] for e in events if e["kind"] == "user_message"]
        assert (1, sorted(set(turns))) == (stops.count("completed"), turns), (stops, turns)

    def test_once_resumes_what_is_due_and_exits(self, agent_dir: Path) -> None:
        """--once resumes every due session, waits for them, and exits 0."""
        deferred_sessions(agent_dir, "o1")
        wait_until_due(agent_dir)
        done = cli(agent_dir, "daemon", "--once", "--json")
        assert 0 == done.returncode, done.stderr
        events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
        assert ["daemon_started", "resuming", "finished", "daemon_stopped"] == events
        assert_ran_once(agent_dir, "o1")

    def test_resumes_a_crashed_session(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """A run killed mid-way is `interrupted`; the daemon takes its lease over and resumes it."""
        write_spec(agent_dir, "loop", "looping")
        run = start(agent_dir, "run", "loop.toml", "--session", "k1")
        run.wait_for(r"^turn 2 \|")
        run.kill()
        listed = json.loads(cli(agent_dir, "ls", "--json").stdout)
        assert "interrupted" == listed[0]["status"]
        cli(agent_dir, "inject", "k1", "finish now")
        done = cli(agent_dir, "daemon", "--once", "--json")
        finished = [json.loads(line) for line in done.stdout.splitlines()][-2]
        assert ("finished", "completed") == (finished["event"], finished["reason"])
        assert "completed" == json.loads(cli(agent_dir, "ls", "--json").stdout)[0]["status"]


class TestMaxConcurrent:
    """``--max-concurrent N``: at most N sessions run at once; the others wait their turn."""

    def test_one_at_a_time_never_overlaps(self, agent_dir: Path) -> None:
        """With N=1 two due sessions run one after the other, earliest due first, none failed."""
        deferred_sessions(agent_dir, "first")
        deferred_sessions(agent_dir, "second")  # due after the first
        wait_until_due(agent_dir)
        done = cli(agent_dir, "daemon", "--once", "--json", "--max-concurrent", "1")
        assert 0 == done.returncode, done.stderr
        reports = [json.loads(line) for line in done.stdout.splitlines()]
        steps = [(r["event"], r["session"]) for r in reports if "session" in r]
        assert [
            ("resuming", "tests/tester/first"),
            ("finished", "tests/tester/first"),
            ("resuming", "tests/tester/second"),
            ("finished", "tests/tester/second"),
        ] == steps
        first_done = [e for e in session_events(agent_dir, "first") if e["kind"] == "checkpoint"]
        second_turn = [
            e
            for e in session_events(agent_dir, "second")
            if e["kind"] == "user_message" and e["payload"]["turn"] == 2
        ]
        assert "completed" == first_done[-1]["payload"]["stop_reason"]
        assert first_done[-1]["at"] <= second_turn[0]["at"], "the second began before the first"

    def test_without_a_limit_both_run_together(self, agent_dir: Path) -> None:
        """The default (4) starts both due sessions before either finishes."""
        deferred_sessions(agent_dir, "one", "two")
        wait_until_due(agent_dir)
        done = cli(agent_dir, "daemon", "--once", "--json")
        events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
        assert ["resuming", "resuming", "finished", "finished"] == events[1:5], events

    @pytest.mark.parametrize("value", ["0", "-1", "many"])
    def test_the_limit_must_be_at_least_one(self, agent_dir: Path, value: str) -> None:
        """--max-concurrent below 1 (or not a number) is a usage error."""
        done = cli(agent_dir, "daemon", "--once", "--max-concurrent", value)
        assert 2 == done.returncode
        assert "--max-concurrent" in done.stderr, done.stderr


class TestJsonLines:
    """``daemon --json``: one JSON object per line, what a log shipper reads."""

    def test_every_line_is_a_json_object_with_time_level_and_event(self, agent_dir: Path) -> None:
        """Report lines and the library's logs (-v) are all JSON with an ISO time with a zone."""
        deferred_sessions(agent_dir, "j1")
        wait_until_due(agent_dir)
        done = cli(agent_dir, "daemon", "--once", "--json", "-v")
        assert 0 == done.returncode, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]  # fails on any non-JSON
        for line in lines:
            assert {"timestamp", "level", "event"} <= line.keys(), line
            assert datetime.fromisoformat(line["timestamp"]).utcoffset() is not None, line
        events = [line["event"] for line in lines]
        assert {"daemon_started", "resuming", "finished", "daemon_stopped"} <= set(events)
        assert "turn_started" in events, "the library's structured logs are not on the stream"
        assert 1 == events.count("finished"), "a report line was printed twice"
