"""``autonomous run`` is as strict as ``validate``, refuses what cannot work, retries what can."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autonomous.spec._validate import validate
from autonomous.testing._server import ScriptedServer, call, error, reply

from .conftest import ENV, cli, session_events, write_spec

#: A spec whose model is a litellm model string served by a ScriptedServer on 127.0.0.1.
HTTP_SPEC = """
name = "{name}"
app = "tests"
user = "tester"
model = "{model}"
goal = "Do the test thing."
instructions = "You are a test agent."
tools = ["brains:tick"]

[litellm]
api_base = "{api_base}"
api_key_env = "TEST_PROVIDER_KEY"

[budgets]
max_turns = 5
max_wallclock = 60
per_turn_timeout = 30
{extra}
"""
HTTP_ENV = {"TEST_PROVIDER_KEY": "test-key"}


def write_http_spec(
    directory: Path,
    name: str,
    api_base: str = "http://127.0.0.1:9/v1",
    *,
    model: str = "openai/scripted-model",
    extra: str = "",
) -> Path:
    """Write ``<name>.toml`` for a litellm model at ``api_base``."""
    path = directory / f"{name}.toml"
    path.write_text(HTTP_SPEC.format(name=name, model=model, api_base=api_base, extra=extra))
    return path


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    """A scripted OpenAI-compatible server for the command's model calls."""
    with ScriptedServer() as srv:
        yield srv


class TestRunIsStrict:
    """run refuses a spec validate finds errors in, before writing anything."""

    def test_a_missing_steering_file_is_an_error_at_run(self, agent_dir: Path) -> None:
        """Exit 2, the file and line named, no event log created."""
        spec = write_spec(agent_dir, "s", "quick")
        spec.write_text(
            spec.read_text().replace("tools =", 'steering_files = ["gone.md"]\ntools =')
        )
        done = cli(agent_dir, "run", "s.toml")
        assert 2 == done.returncode, done.stderr
        assert "s.toml:8: steering_files: gone.md: does not exist" in done.stderr
        assert not (agent_dir / "autonomous.db").exists()

    def test_every_problem_is_reported_at_once(self, agent_dir: Path) -> None:
        """A misspelt key and a tool that does not import: both, with their lines."""
        spec = write_spec(agent_dir, "m", "quick")
        spec.write_text(
            spec.read_text()
            .replace('tools = ["brains:tick"]', 'tools = ["brains:tick", "nowhere:tool"]')
            .replace("max_turns", "max_turn")
        )
        done = cli(agent_dir, "run", "m.toml")
        assert 2 == done.returncode
        assert "m.toml:11: budgets.max_turn: unknown key; did you mean 'max_turns'?" in done.stderr
        assert "m.toml:8: tools[1]: cannot import module 'nowhere'" in done.stderr
        assert "Traceback" not in done.stderr

    def test_resume_checks_the_spec_again(self, agent_dir: Path) -> None:
        """A spec broken after the session started: resume refuses it, exit 2, no new event."""
        spec = write_spec(agent_dir, "r", "deferring", extra='[scheduler]\nkind = "exit"\n')
        first = cli(agent_dir, "run", "r.toml", "--session", "r1")
        assert 10 == first.returncode, first.stderr
        spec.write_text(
            spec.read_text().replace("tools =", 'steering_files = ["gone.md"]\ntools =')
        )
        before = len(session_events(agent_dir, "r1"))
        done = cli(agent_dir, "resume", "r1")
        assert 2 == done.returncode, done.stderr
        assert "r.toml:8: steering_files: gone.md: does not exist" in done.stderr
        assert before == len(session_events(agent_dir, "r1"))

    def test_max_wallclock_takes_a_duration(self, agent_dir: Path) -> None:
        """--max-wallclock 30m runs; --max-wallclock soon is a usage error."""
        write_spec(agent_dir, "w", "quick")
        done = cli(agent_dir, "run", "w.toml", "--max-wallclock", "30m", "--json")
        assert 0 == done.returncode, done.stderr
        bad = cli(agent_dir, "run", "w.toml", "--max-wallclock", "soon")
        assert 2 == bad.returncode and "'soon' is not a duration" in bad.stderr

    def test_a_duration_in_the_spec_runs(self, agent_dir: Path) -> None:
        """max_wallclock = "2h" in [budgets] is two hours, and the run completes."""
        spec = write_spec(agent_dir, "d", "quick")
        spec.write_text(spec.read_text().replace("max_wallclock = 60", 'max_wallclock = "2h"'))
        assert 0 == cli(agent_dir, "run", "d.toml").returncode


class TestAskModeWithoutATerminal:
    """An ask-mode gate with nobody to ask is refused in one line."""

    def test_refused_with_the_fix(self, agent_dir: Path) -> None:
        """stdin not a terminal: exit 2, one line naming permissions.mode and the fix."""
        write_spec(agent_dir, "a", "quick", extra='[permissions]\nmode = "ask"\n')
        done = subprocess.run(
            [sys.executable, "-m", "autonomous", "run", "a.toml"],
            cwd=agent_dir,
            env=ENV,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert 2 == done.returncode
        lines = done.stderr.strip().splitlines()
        assert 1 == len(lines), done.stderr
        assert 'a.toml:14: permissions.mode = "ask" needs a terminal' in lines[0]
        assert 'mode = "allow"' in lines[0]
        assert not (agent_dir / "autonomous.db").exists()


class TestUnpricedBudgets:
    """A cost cap on a model with no price is refused: it could never trip."""

    def test_validate_reports_it(self, in_process: Path) -> None:
        """An error at budgets.max_cost_usd naming the fix."""
        path = write_http_spec(in_process, "u", model="openai/no-such-model-xyz")
        path.write_text(
            path.read_text().replace("max_turns = 5", "max_turns = 5\nmax_cost_usd = 1")
        )
        found = [p for p in validate(path) if p.severity == "error"]
        assert ["budgets.max_cost_usd"] == [p.where.split(": ")[-1] for p in found]
        assert "add [pricing] or remove max_cost_usd" in found[0].message

    def test_a_pricing_table_or_a_listed_model_is_fine(self, in_process: Path) -> None:
        """[pricing] prices any model; a model in litellm's table is priced by it."""
        priced = write_http_spec(
            in_process, "p", model="openai/no-such-model-xyz",
            extra="max_cost_usd = 1\n[pricing]\ninput_per_mtok = 1.0\n",
        )  # fmt: skip
        listed = write_http_spec(
            in_process, "l", model="openai/gpt-4o-mini", extra="max_cost_usd = 1"
        )
        assert [] == [p for p in validate(priced) + validate(listed) if p.severity == "error"]

    def test_a_scripted_model_is_free_its_cap_is_an_error(self, in_process: Path) -> None:
        """A scripted model costs nothing without [pricing]: a dollar cap could never trip,
        an error as in the library."""
        path = write_spec(in_process, "f", "quick", extra="max_cost_usd = 1")
        found = {p.where.split(": ")[-1]: p for p in validate(path)}
        assert "error" == found["budgets.max_cost_usd"].severity
        assert "[pricing]" in found["budgets.max_cost_usd"].message

    def test_run_refuses_it_before_writing(self, agent_dir: Path) -> None:
        """Exit 2, the fix in the message, no event log; --max-cost on the command line too."""
        write_http_spec(agent_dir, "u", model="openai/no-such-model-xyz")
        done = cli(agent_dir, "run", "u.toml", "--max-cost", "0.5", env=HTTP_ENV, timeout=60)
        assert 2 == done.returncode, done.stderr
        assert "add [pricing] or remove max_cost_usd" in done.stderr
        assert not (agent_dir / "autonomous.db").exists()


class TestTransientErrorsAreRetried:
    """The spec's retry policy, over litellm's real HTTP path."""

    def test_one_429_then_success_completes(self, agent_dir: Path, server: ScriptedServer) -> None:
        """A 429 (Retry-After: 0) is retried; the run completes with exit 0."""
        server.push(
            error(429, "slow down", retry_after=0),
            call("report_done", {"state": "done", "detail": "ok"}),
            reply("bye"),
        )
        write_http_spec(agent_dir, "r", server.api_base)
        done = cli(agent_dir, "run", "r.toml", "--json", env=HTTP_ENV, timeout=60)
        assert 0 == done.returncode, done.stderr
        assert "completed" == json.loads(done.stdout)["reason"]
        assert 3 == server.request_count

    def test_a_401_ends_the_run_at_once(self, agent_dir: Path, server: ScriptedServer) -> None:
        """A permanent error: one request, exit 13 (failed)."""
        server.push(error(401, "bad key"))
        write_http_spec(agent_dir, "k", server.api_base)
        done = cli(agent_dir, "run", "k.toml", "--json", env=HTTP_ENV, timeout=60)
        assert 13 == done.returncode, done.stderr
        summary = json.loads(done.stdout)
        assert "retry_policy_aborted" == summary["reason"] and "401" in summary["error"]
        assert 1 == server.request_count

    def test_attempts_zero_turns_retries_off(self, agent_dir: Path, server: ScriptedServer) -> None:
        """[retry] attempts = 0: a 503 ends the run at once."""
        server.push(error(503, "busy", retry_after=0))
        write_http_spec(agent_dir, "z", server.api_base, extra="[retry]\nattempts = 0")
        done = cli(agent_dir, "run", "z.toml", env=HTTP_ENV, timeout=60)
        assert (13, 1) == (done.returncode, server.request_count), done.stderr
