"""``run``, ``resume``, ``ls``, ``show`` and ``inject`` through the real entry point."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from autonomous.testing import server

from .conftest import BRAINS, Background, cli, session_events, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'


def run_json(cwd: Path, *args: str, status: int = 0) -> dict[str, object]:
    """``run ... --json`` exited with ``status``; its result document."""
    done = cli(cwd, "run", *args, "--json")
    assert status == done.returncode, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def completed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CompletedProcess[str]]:
    """One agent directory where ``run quick.toml --session q1 --json`` ran to completion."""
    directory = tmp_path_factory.mktemp("completed")
    shutil.copy(BRAINS, directory / "brains.py")
    write_spec(directory, "quick", "quick")
    return directory, cli(directory, "run", "quick.toml", "--session", "q1", "--json")


class TestRun:
    """Running a spec in the foreground, and looking at the session afterwards."""

    def test_run_to_completion(self, completed: tuple[Path, CompletedProcess[str]]) -> None:
        """--json prints the stop reason, the detail and the totals; progress goes to stderr."""
        directory, done = completed
        assert 0 == done.returncode, done.stderr
        result = json.loads(done.stdout)
        assert "completed" == result["reason"]
        assert "all done" == result["done_detail"]
        assert "tests/tester/q1" == result["session"]
        assert 1 == result["turns"]
        assert "turn 1 | tokens 20 in / 10 out" in done.stderr
        assert (directory / "autonomous.db").exists()

    def test_ls_after_a_run(self, completed: tuple[Path, CompletedProcess[str]]) -> None:
        """ls lists the session with its status, stop reason and turns."""
        directory, _ = completed
        listed = json.loads(cli(directory, "ls", "--json").stdout)
        assert [("tests/tester/q1", "completed", "completed", 1)] == [
            (r["session"], r["status"], r["stop_reason"], r["turns"]) for r in listed
        ]

    def test_show_after_a_run(self, completed: tuple[Path, CompletedProcess[str]]) -> None:
        """show prints the timeline; --json gives every event, the spec note first."""
        directory, _ = completed
        shown = cli(directory, "show", "q1")
        assert 0 == shown.returncode, shown.stderr
        assert "report_done" in shown.stdout and "checkpoint" in shown.stdout
        events = json.loads(cli(directory, "show", "tests/tester/q1", "--json").stdout)
        assert "note" == events[0]["kind"]
        assert str(directory / "quick.toml") == events[0]["payload"]["data"]["spec"]
        assert "completed" == events[-1]["payload"].get("stop_reason")

    def test_misuse_is_a_clear_error(self, completed: tuple[Path, CompletedProcess[str]]) -> None:
        """An existing session is not run again (a usage error, 2); an unknown session is
        named (1)."""
        directory, _ = completed
        again = cli(directory, "run", "quick.toml", "--session", "q1")
        assert (2, True) == (again.returncode, "already exists" in again.stderr)
        missing = cli(directory, "show", "nope")
        assert (1, True) == (missing.returncode, "no session 'nope'" in missing.stderr)

    def test_resume_of_a_completed_session_returns_at_once(
        self, completed: tuple[Path, CompletedProcess[str]]
    ) -> None:
        """Resuming a completed session reports it, with no new turn."""
        directory, _ = completed
        result = json.loads(cli(directory, "resume", "q1", "--json").stdout)
        assert ("completed", 1) == (result["reason"], result["turns"])


class TestInjectAndResume:
    """Control of a session that is not running."""

    def test_inject_then_resume_delivers_the_message(self, agent_dir: Path) -> None:
        """A message injected into a deferred session reaches the model on resume, once."""
        write_spec(agent_dir, "later", "deferring", extra=DEFERRING)
        first = run_json(agent_dir, "later.toml", "--session", "d1", status=10)  # deferred
        assert "deferred" == first["reason"]
        injected = cli(agent_dir, "inject", "d1", "disk 7 is full", "--as", "alice", "--json")
        assert 0 == injected.returncode, injected.stderr
        message_id = json.loads(injected.stdout)["message_id"]
        resumed = cli(agent_dir, "resume", "d1", "--json")
        assert 0 == resumed.returncode, resumed.stderr
        result = json.loads(resumed.stdout)
        assert "completed" == result["reason"]
        assert "(from alice) disk 7 is full" in result["done_detail"]
        events = session_events(agent_dir, "d1")
        queued = [e for e in events if e["kind"] == "inbox_queued"]
        assert "cli:alice" == queued[0]["author"]
        assert "alice" == queued[0]["payload"]["caller"]["identity"]
        delivered = [e for e in events if e["kind"] == "inbox_delivered"]
        assert [[message_id]] == [e["payload"]["message_ids"] for e in delivered]


class TestInterrupt:
    """Ctrl-C during a run."""

    def test_ctrl_c_stops_cleanly_and_the_session_resumes(
        self, agent_dir: Path, start: Callable[..., Background]
    ) -> None:
        """SIGINT ends the run context_cancelled with exit 130; resume continues it."""
        write_spec(agent_dir, "loop", "looping")
        run = start(agent_dir, "run", "loop.toml", "--session", "l1", "--json")
        run.wait_for(r"^turn 2 \|")
        run.proc.send_signal(signal.SIGINT)
        assert 130 == run.finish()
        result = json.loads(run.stdout())
        assert "context_cancelled" == result["reason"]
        assert result["turns"] >= 2
        listed = json.loads(cli(agent_dir, "ls", "--json").stdout)
        assert ("interrupted", "context_cancelled") == (
            listed[0]["status"],
            listed[0]["stop_reason"],
        )
        cli(agent_dir, "inject", "l1", "please finish")
        resumed = json.loads(cli(agent_dir, "resume", "l1", "--json").stdout)
        assert "completed" == resumed["reason"]
        assert "please finish" in str(resumed["done_detail"])
        assert resumed["turns"] > result["turns"]


class TestLitellmModel:
    """A spec run with a litellm model through --model, over litellm's real HTTP path."""

    def test_model_flag_runs_a_litellm_model(self, agent_dir: Path) -> None:
        """--model replaces the scripted model; [litellm] settings and api_key_env apply."""
        with server.ScriptedServer() as srv:
            srv.push(
                server.call("report_done", {"state": "done", "detail": "over http"}),
                server.reply("bye"),
            )
            extra = f'[litellm]\napi_base = "{srv.api_base}"\napi_key_env = "CLI_TEST_KEY"\n'
            write_spec(agent_dir, "remote", "quick", extra=extra)
            done = cli(
                agent_dir,
                "run",
                "remote.toml",
                "--model",
                "openai/scripted-model",
                "--session",
                "h1",
                "--json",
                env={"CLI_TEST_KEY": "test-key"},
            )
            requests = srv.requests
        assert 0 == done.returncode, done.stderr
        assert ("completed", "over http") == tuple(
            json.loads(done.stdout)[k] for k in ("reason", "done_detail")
        )
        assert "scripted-model" == requests[0]["model"]
        assert "tick" in [t["function"]["name"] for t in requests[0]["tools"]]
        note = session_events(agent_dir, "h1")[0]["payload"]["data"]
        assert "openai/scripted-model" == note["model"]
