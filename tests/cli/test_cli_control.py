"""Control that sticks and honest results: stop and pause of sessions that are not running,
control of finished sessions, exit statuses, signals during shutdown, closed pipes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from autonomous._cli._run import continue_hint

from .conftest import ENV, Background, cli, session_events, wait_until_due, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'


def deferred(agent_dir: Path, session: str) -> None:
    """Run the deferring agent: it exits deferred (status 10), due one second later."""
    write_spec(agent_dir, "later", "deferring", extra=DEFERRING)
    done = cli(agent_dir, "run", "later.toml", "--session", session, "--json", "-q")
    assert (10, "deferred") == (done.returncode, json.loads(done.stdout)["reason"]), done.stderr


def status(agent_dir: Path, session: str) -> str:
    """What ``ls --json`` says of the session."""
    rows = json.loads(cli(agent_dir, "ls", "--json").stdout)
    return str(next(r["status"] for r in rows if r["session_id"] == session))


def turns_of(agent_dir: Path, session: str) -> list[int]:
    """The turns the session's model was prompted for."""
    events = session_events(agent_dir, session)
    return [e["payload"]["turn"] for e in events if e["kind"] == "user_message"]


@pytest.mark.usefixtures("cli_store")  # on SQLite and on PostgreSQL
class TestStopSticks:
    """``stop`` of a session that is not running."""

    def test_a_stopped_session_is_shown_stopped_and_never_resumed(self, agent_dir: Path) -> None:
        """ls says stopped; the daemon leaves it; resume refuses it (15) unless --force."""
        deferred(agent_dir, "s1")
        wait_until_due(agent_dir)
        assert 0 == cli(agent_dir, "stop", "s1").returncode
        assert "stopped" == status(agent_dir, "s1")
        daemon = cli(agent_dir, "daemon", "--once", "--json")
        assert 0 == daemon.returncode, daemon.stderr
        assert "resuming" not in daemon.stdout
        assert [1] == turns_of(agent_dir, "s1")
        refused = cli(agent_dir, "resume", "s1")
        assert 15 == refused.returncode, refused.stderr
        assert "--force" in refused.stdout + refused.stderr
        assert [1] == turns_of(agent_dir, "s1")
        forced = cli(agent_dir, "resume", "s1", "--force", "--json", "-q")
        assert 0 == forced.returncode, forced.stderr
        assert "completed" == json.loads(forced.stdout)["reason"]
        assert [1, 2] == turns_of(agent_dir, "s1")

    def test_ctrl_c_is_interrupted_not_stopped(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """A run stopped by a signal stays resumable without --force: ls says interrupted."""
        write_spec(agent_dir, "loop", "looping")
        run = start(agent_dir, "run", "loop.toml", "--session", "i1")
        run.wait_for(r"^turn 1 \|")
        run.proc.send_signal(signal.SIGINT)
        assert 130 == run.finish()
        assert "interrupted" == status(agent_dir, "i1")
        assert "next step autonomous resume tests/tester/i1" in run.stdout()
        assert "--force" not in run.stdout()


class TestContinueHint:
    """What the end of a run says to do next."""

    @pytest.mark.parametrize(
        ("reason", "interrupted", "says"),
        [
            ("completed", False, ""),
            ("deferred", False, "autonomous daemon"),
            ("context_cancelled", True, "autonomous resume a/u/s"),
            ("context_cancelled", False, "--force"),
            ("max_turns_exceeded", False, "--max-turns"),
            ("retry_policy_aborted", False, "autonomous resume a/u/s"),
        ],
    )
    def test_the_hint_fits_the_stop(self, reason: str, interrupted: bool, says: str) -> None:
        """A signal's stop resumes as it is; a stop request needs --force; a budget more."""
        hint = continue_hint("a/u/s", reason, interrupted=interrupted)
        assert (says in hint) if says else hint == ""
        if reason == "context_cancelled" and interrupted:
            assert "--force" not in hint


@pytest.mark.usefixtures("cli_store")  # on SQLite and on PostgreSQL
class TestPauseSticks:
    """``pause`` of a session that is not running."""

    def test_the_daemon_shows_it_paused_and_resume_honours_it(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """ls and the daemon say paused (no turn runs); a resume starts paused until unpaused."""
        deferred(agent_dir, "p1")
        wait_until_due(agent_dir)
        assert 0 == cli(agent_dir, "pause", "p1").returncode
        assert "paused" == status(agent_dir, "p1")
        daemon = cli(agent_dir, "daemon", "--once", "--json")
        reports = [json.loads(line) for line in daemon.stdout.splitlines()]
        assert ["p1"] == [r["session"].split("/")[-1] for r in reports if r["event"] == "paused"], (
            daemon.stdout
        )
        assert not [r for r in reports if r["event"] == "resuming"]
        assert [1] == turns_of(agent_dir, "p1")
        resumed = start(agent_dir, "resume", "p1", "--json")
        resumed.wait_for(r"^paused before turn 2")
        assert [1] == turns_of(agent_dir, "p1")
        assert 0 == cli(agent_dir, "unpause", "p1").returncode
        assert 0 == resumed.finish(timeout=20)
        assert "completed" == json.loads(resumed.stdout())["reason"]
        assert [1, 2] == turns_of(agent_dir, "p1")


@pytest.mark.usefixtures("cli_store")  # on SQLite and on PostgreSQL
class TestFinishedSessions:
    """Control of a session that has finished."""

    @pytest.mark.parametrize("command", [["inject", "hello"], ["pause"], ["stop"], ["unpause"]])
    def test_control_of_a_completed_session_is_refused(
        self, agent_dir: Path, command: list[str]
    ) -> None:
        """Exit 1 with a message saying it completed; nothing is appended."""
        write_spec(agent_dir, "quick", "quick")
        assert 0 == cli(agent_dir, "run", "quick.toml", "--session", "c1", "-q").returncode
        before = len(session_events(agent_dir, "c1"))
        verb, *rest = command
        done = cli(agent_dir, verb, "c1", *rest)
        assert 1 == done.returncode
        assert "completed" in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert "" == done.stdout
        assert before == len(session_events(agent_dir, "c1"))

    def test_an_unknown_session_is_an_error_not_a_usage_error(self, agent_dir: Path) -> None:
        """A session the log does not have: exit 1 (2 is kept for usage errors)."""
        write_spec(agent_dir, "quick", "quick")
        assert 0 == cli(agent_dir, "run", "quick.toml", "--session", "c2", "-q").returncode
        done = cli(agent_dir, "inject", "nope", "hello")
        assert (1, True) == (done.returncode, "no session 'nope'" in done.stderr), done.stderr


class TestExitStatus:
    """Statuses scripts can branch on."""

    @pytest.mark.usefixtures("cli_store")
    def test_budget_stop(self, agent_dir: Path) -> None:
        """A run that hits max_turns exits 11."""
        write_spec(agent_dir, "loop", "looping", max_turns=2)
        done = cli(agent_dir, "run", "loop.toml", "--session", "b1", "--json", "-q")
        assert (11, "max_turns_exceeded") == (done.returncode, json.loads(done.stdout)["reason"])

    def test_usage_error(self, agent_dir: Path) -> None:
        """A bad flag is 2, and --help lists the statuses."""
        assert 2 == cli(agent_dir, "ls", "--no-such-flag").returncode
        shown = cli(agent_dir, "--help").stdout
        for code in ("10", "11", "12", "13", "14", "15", "130", "143"):
            assert f"\n  {code:>3}  " in shown, code

    def test_store_error(self, agent_dir: Path) -> None:
        """A log that is not a database is 4, in one line."""
        (agent_dir / "autonomous.db").write_bytes(b"this is not sqlite" * 100)
        done = cli(agent_dir, "ls")
        assert 4 == done.returncode, done.stderr
        assert "Traceback" not in done.stderr and 1 == len(done.stderr.strip().splitlines())


def final_checkpoints(agent_dir: Path, session: str) -> list[dict[str, object]]:
    """The checkpoints the run wrote as it stopped (stop reason context_cancelled)."""
    events = session_events(agent_dir, session)
    return [
        e
        for e in events
        if e["kind"] == "checkpoint" and e["payload"].get("stop_reason") == "context_cancelled"
    ]


@pytest.mark.usefixtures("cli_store")  # on SQLite and on PostgreSQL
class TestSecondSignal:
    """A second SIGINT or SIGTERM while a run stops."""

    @pytest.mark.parametrize("attempt", range(8))
    def test_two_signals_1ms_apart(self, agent_dir: Path, attempt: int) -> None:
        """No hang, no traceback, one final checkpoint, the interrupted status (the first
        signal's, when it was handled before the second arrived)."""
        write_spec(agent_dir, "loop", "looping")
        first, second = [
            (signal.SIGINT, signal.SIGINT),
            (signal.SIGTERM, signal.SIGTERM),
            (signal.SIGINT, signal.SIGTERM),
            (signal.SIGTERM, signal.SIGINT),
        ][attempt % 4]
        run = Background(agent_dir, "run", "loop.toml", "--session", f"x{attempt}")
        try:
            run.wait_for(r"^turn 1 \|")
            run.proc.send_signal(first)
            time.sleep(0.001)
            run.proc.send_signal(second)
            code = run.finish(timeout=20)
        finally:
            run.kill()
        stderr = "\n".join(run.lines["stderr"])
        # Usually the first signal sent sets the status; two that arrive close together may be
        # handled the other way round (CPython runs pending handlers in signal-number order, and
        # the kernel may hand the two to different threads of the process).
        assert code in (128 + first, 128 + second), stderr
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
        assert 1 == len(final_checkpoints(agent_dir, f"x{attempt}"))
        assert "interrupted" == status(agent_dir, f"x{attempt}")

    def test_a_signal_storm_during_shutdown(self, agent_dir: Path) -> None:
        """Ten signals as fast as they can be sent: the same clean end."""
        write_spec(agent_dir, "loop", "looping")
        run = Background(agent_dir, "run", "loop.toml", "--session", "storm")
        try:
            run.wait_for(r"^turn 1 \|")
            for n in range(10):
                run.proc.send_signal(signal.SIGTERM if n % 2 else signal.SIGINT)
            code = run.finish(timeout=20)
        finally:
            run.kill()
        stderr = "\n".join(run.lines["stderr"])
        # The first signal handled sets the status. The kernel may hand the two kinds to
        # different threads of the process (a store's or the event loop's worker threads), whose
        # handlers can then trip out of sending order: either status is the first one's.
        assert code in (130, 143) and "Traceback" not in stderr, stderr
        assert 1 == len(final_checkpoints(agent_dir, "storm"))


@pytest.mark.usefixtures("cli_store")  # on SQLite and on PostgreSQL
class TestClosedPipe:
    """Output into a pipe whose reader has gone (``| head``)."""

    @pytest.mark.parametrize(
        "args", [["ls"], ["ls", "--json"], ["show", "q1"], ["show", "q1", "--json"]]
    )
    def test_no_broken_pipe_traceback(self, agent_dir: Path, args: list[str]) -> None:
        """The reader closes at once; the command exits 0 with nothing on stderr."""
        write_spec(agent_dir, "quick", "quick")
        assert 0 == cli(agent_dir, "run", "quick.toml", "--session", "q1", "-q").returncode
        proc = subprocess.Popen(
            [sys.executable, "-m", "autonomous", *args],
            cwd=agent_dir,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        proc.stdout.close()  # before the command (still importing) writes a byte
        _, err = proc.communicate(timeout=30)
        assert (0, "") == (proc.returncode, err)

    def test_a_run_into_a_closed_pipe_keeps_its_status(self, agent_dir: Path) -> None:
        """``run --json | head -c 100``: the run's own status, no traceback."""
        write_spec(agent_dir, "loop", "looping", max_turns=2)
        command = f"{sys.executable} -m autonomous run loop.toml --json -q | head -c 10"
        done = subprocess.run(
            ["bash", "-c", command + "; exit ${PIPESTATUS[0]}"],
            cwd=agent_dir,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert (11, "") == (done.returncode, done.stderr)  # max_turns: the budget status
        assert [1, 2] == turns_of(agent_dir, next(iter(sessions(agent_dir))))


def sessions(agent_dir: Path) -> list[str]:
    """The session ids of the log."""
    return [r["session_id"] for r in json.loads(cli(agent_dir, "ls", "--json").stdout)]
