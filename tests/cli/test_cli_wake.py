"""``autonomous wake SESSION`` and ``autonomous inject SESSION TEXT --wake``: end a session's
wait for its wake time, as ``send_control(log, key, "wake")`` does."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Background, cli, session_events, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'
SLEEPING = '[scheduler]\nkind = "sleep"\n'


def napping(agent_dir: Path, session: str) -> None:
    """A session that deferred itself for an hour (exit 10)."""
    write_spec(agent_dir, "nap", "napping", extra=DEFERRING)
    done = cli(agent_dir, "run", "nap.toml", "--session", session, "-q")
    assert 10 == done.returncode, done.stderr


@pytest.mark.usefixtures("cli_store")  # on SQLite and on PostgreSQL
class TestWake:
    def test_a_woken_session_resumes_without_waiting_its_hour(self, agent_dir: Path) -> None:
        """wake appends a wake request (by whom); the next resume does not wait for the
        wake time an hour away, and completes."""
        napping(agent_dir, "w1")
        sent = cli(agent_dir, "wake", "w1", "--as", "dave")
        assert 0 == sent.returncode, sent.stderr
        assert sent.stdout.startswith("woke tests/tester/w1"), sent.stdout
        control = [e for e in session_events(agent_dir, "w1") if e["kind"] == "control"]
        assert [("wake", "cli:dave")] == [(c["payload"]["action"], c["author"]) for c in control]
        started = time.monotonic()
        done = cli(agent_dir, "resume", "w1", "--json", "-q")
        assert (0, "completed") == (done.returncode, json.loads(done.stdout)["reason"])
        assert time.monotonic() - started < 20  # not the hour

    def test_inject_with_wake_queues_and_wakes_in_one_append(self, agent_dir: Path) -> None:
        """inject --wake: the message and a wake request, appended together; the resume
        does not wait and delivers the message."""
        napping(agent_dir, "w2")
        sent = cli(agent_dir, "inject", "w2", "look now", "--wake", "--json")
        assert 0 == sent.returncode, sent.stderr
        assert json.loads(sent.stdout)["woke"] is True
        events = session_events(agent_dir, "w2")
        queued, woken = events[-2:]
        assert ("inbox_queued", "control", "wake") == (
            queued["kind"],
            woken["kind"],
            woken["payload"]["action"],
        )
        assert queued["seq"] + 1 == woken["seq"]
        done = cli(agent_dir, "resume", "w2", "--json", "-q")
        assert (0, "completed") == (done.returncode, json.loads(done.stdout)["reason"])
        delivered = [e for e in session_events(agent_dir, "w2") if e["kind"] == "user_message"]
        assert "look now" in delivered[-1]["payload"]["text"]

    def test_wake_of_a_completed_session_is_refused(self, agent_dir: Path) -> None:
        """A finished session cannot be woken: exit 1, nothing appended."""
        write_spec(agent_dir, "quick", "quick")
        assert 0 == cli(agent_dir, "run", "quick.toml", "--session", "q1", "-q").returncode
        before = len(session_events(agent_dir, "q1"))
        refused = cli(agent_dir, "wake", "q1")
        assert 1 == refused.returncode
        assert "completed" in refused.stderr, refused.stderr
        assert before == len(session_events(agent_dir, "q1"))


class TestWakeASleepingRun:
    def test_wake_ends_an_in_process_sleep(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """A run sleeping an hour in its own process (a sleep scheduler) goes on at once."""
        write_spec(agent_dir, "nap", "napping", extra=SLEEPING)
        run = start(agent_dir, "run", "nap.toml", "--session", "s1", "--json")
        run.wait_for(r"^next turn in")
        assert 0 == cli(agent_dir, "wake", "s1").returncode
        assert 0 == run.finish(timeout=20)
        assert "completed" == json.loads(run.stdout())["reason"]


class TestDaemonRunsAWokenSession:
    def test_a_daemon_runs_a_woken_session_at_once(self, agent_dir: Path) -> None:
        """A session deferred for an hour, woken: the daemon's next pass runs it."""
        napping(agent_dir, "d1")
        assert 0 == cli(agent_dir, "wake", "d1").returncode
        done = cli(agent_dir, "daemon", "--once", "--json")
        events = [json.loads(line) for line in done.stdout.splitlines()]
        finished = [e for e in events if e["event"] == "finished"]
        assert ["completed"] == [e["reason"] for e in finished], done.stdout
