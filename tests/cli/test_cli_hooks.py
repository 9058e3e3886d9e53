"""The spec's ``on_exit`` hook: run by ``run``, ``resume`` and ``daemon`` when a run returns."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from autonomous._cli._hooks import run_hook
from autonomous.spec._hooks import hook_argv, hook_timeout

from .conftest import BRAINS, cli, wait_until_due, write_spec

#: A hook that writes the AUTONOMOUS_* variables of its environment (and its arguments) as JSON
#: to the file named by its first argument.
RECORDER = """#!{python}
import json, os, sys
seen = {{k: v for k, v in os.environ.items() if k.startswith("AUTONOMOUS_")}}
seen["argv"] = sys.argv[1:]
seen["cwd"] = os.getcwd()
with open(sys.argv[1], "w") as out:
    json.dump(seen, out)
"""
FAILING = "#!/bin/sh\necho hook says no >&2\nexit 7\n"
SLOW = "#!/bin/sh\nexec sleep 30\n"


def hooked_agent(root: Path, brain: str, on_exit: str, *, top: str = "", extra: str = "") -> Path:
    """An agent directory ``root/agent`` with a spec whose hook is ``on_exit`` (TOML, with the
    top-level keys ``top``; tables in ``extra``) and the hooks ``hooks/record.py``,
    ``hooks/fail.sh`` and ``hooks/slow.sh``; returns the directory."""
    agent = root / "agent"
    (agent / "hooks").mkdir(parents=True)
    shutil.copy(BRAINS, agent / "brains.py")
    for name, text in (("record.py", RECORDER), ("fail.sh", FAILING), ("slow.sh", SLOW)):
        hook = agent / "hooks" / name
        hook.write_text(text.format(python=sys.executable))
        hook.chmod(0o755)
    spec = write_spec(agent, "hooked", brain, extra=extra)
    spec.write_text(f"on_exit = {on_exit}\n{top}" + spec.read_text())
    return agent


class TestExitHook:
    """The completion hook."""

    def test_a_completed_run_passes_its_end_to_the_hook(self, tmp_path: Path) -> None:
        """The hook runs in the spec's directory with the session, reason, outcome and detail."""
        agent = hooked_agent(
            tmp_path,
            "alerting",
            '["hooks/record.py", "seen.json", "--to", "ops"]',
            top='outcomes = ["calm", "alert"]\n',
        )
        # run from elsewhere: the program is found relative to the spec, not the working directory
        done = cli(tmp_path, "run", "agent/hooked.toml", "--session", "h1", "--json", "-q")
        assert 0 == done.returncode, done.stderr
        seen = json.loads((agent / "seen.json").read_text())
        expected = {
            "AUTONOMOUS_SESSION": "tests/tester/h1",
            "AUTONOMOUS_STOP_REASON": "completed",
            "AUTONOMOUS_OUTCOME": "alert",
            "AUTONOMOUS_DETAIL": "disk at 97%",
            "AUTONOMOUS_TURNS": "1",
            "argv": ["seen.json", "--to", "ops"],
            "cwd": str(agent.resolve()),
        }
        assert expected == {k: seen.get(k) for k in expected}
        assert 0.0 == float(seen["AUTONOMOUS_COST_USD"])
        assert str((agent / "hooked.toml").resolve()) == seen["AUTONOMOUS_SPEC"]
        assert "completed" == json.loads(done.stdout)["reason"], "the hook wrote on stdout"

    def test_a_failing_hook_is_reported_and_the_exit_status_kept(self, tmp_path: Path) -> None:
        """A hook exiting 7 is a warning on stderr; the run still exits 0 (completed)."""
        hooked_agent(tmp_path, "quick", '["hooks/fail.sh"]')
        done = cli(tmp_path, "run", "agent/hooked.toml", "--session", "f1", "--json", "-q")
        assert 0 == done.returncode, done.stderr
        assert "completed" == json.loads(done.stdout)["reason"]
        assert "on_exit hook" in done.stderr and "status 7" in done.stderr, done.stderr

    def test_a_missing_program_is_refused_before_the_run(self, tmp_path: Path) -> None:
        """A hook program that does not exist is a spec error: run refuses it (2) naming the
        program, and runs nothing."""
        hooked_agent(
            tmp_path, "deferring", '["hooks/nowhere.sh"]', extra='[scheduler]\nkind = "exit"\n'
        )
        done = cli(tmp_path, "run", "agent/hooked.toml", "--session", "m1", "--json", "-q")
        assert 2 == done.returncode, done.stderr
        assert "on_exit" in done.stderr and "nowhere.sh" in done.stderr, done.stderr
        assert not (tmp_path / "autonomous.db").exists()  # refused before the log is opened

    @pytest.mark.anyio
    async def test_a_program_gone_since_is_a_failure_not_an_error(self, tmp_path: Path) -> None:
        """A hook that cannot start when its run ends (removed meanwhile) is reported, not
        raised: the run's exit status stays the run's."""
        failure = await run_hook(["hooks/nowhere.sh"], tmp_path, {})
        assert failure is not None and "could not start" in failure, failure

    def test_a_hook_that_outlives_its_timeout_is_killed(self, tmp_path: Path) -> None:
        """A hook still running after its timeout is killed and reported; the run exits 0."""
        hooked_agent(tmp_path, "quick", '["hooks/slow.sh"]')
        env = {"AUTONOMOUS_HOOK_TIMEOUT": "0.5"}
        done = cli(tmp_path, "run", "agent/hooked.toml", "--session", "s1", "-q", env=env)
        assert 0 == done.returncode, done.stderr
        assert "did not finish within 0.5 s" in done.stderr, done.stderr

    def test_resume_runs_the_hook(self, tmp_path: Path) -> None:
        """`resume` runs the hook too, with the resumed run's end."""
        agent = hooked_agent(
            tmp_path, "deferring", '["hooks/record.py", "seen.json"]',
            extra='[scheduler]\nkind = "exit"\n',
        )  # fmt: skip
        assert 10 == cli(tmp_path, "run", "agent/hooked.toml", "--session", "r1", "-q").returncode
        assert "deferred" == json.loads((agent / "seen.json").read_text())["AUTONOMOUS_STOP_REASON"]
        wait_until_due(tmp_path)
        done = cli(tmp_path, "resume", "r1", "-q")
        assert 0 == done.returncode, done.stderr
        seen = json.loads((agent / "seen.json").read_text())
        assert ("completed", "2") == (seen["AUTONOMOUS_STOP_REASON"], seen["AUTONOMOUS_TURNS"])

    def test_the_daemon_runs_the_hook(self, tmp_path: Path) -> None:
        """The daemon runs a resumed session's hook, and reports a failing one."""
        agent = hooked_agent(
            tmp_path, "deferring", '["hooks/record.py", "seen.json"]',
            extra='[scheduler]\nkind = "exit"\n',
        )  # fmt: skip
        assert 10 == cli(tmp_path, "run", "agent/hooked.toml", "--session", "d1", "-q").returncode
        wait_until_due(tmp_path)
        done = cli(tmp_path, "daemon", "--once", "--json")
        assert 0 == done.returncode, done.stderr
        seen = json.loads((agent / "seen.json").read_text())
        assert ("tests/tester/d1", "completed") == (
            seen["AUTONOMOUS_SESSION"],
            seen["AUTONOMOUS_STOP_REASON"],
        )
        events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
        assert "hook_failed" not in events, done.stdout

    def test_the_daemon_reports_a_failing_hook(self, tmp_path: Path) -> None:
        """A failing hook is a hook_failed line of the daemon; the session is still finished."""
        hooked_agent(
            tmp_path, "deferring", '["hooks/fail.sh"]', extra='[scheduler]\nkind = "exit"\n'
        )
        cli(tmp_path, "run", "agent/hooked.toml", "--session", "d2", "-q")
        wait_until_due(tmp_path)
        done = cli(tmp_path, "daemon", "--once", "--json")
        assert 0 == done.returncode, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        failed = [line for line in lines if line["event"] == "hook_failed"]
        assert ["tests/tester/d2"] == [line["session"] for line in failed], lines
        assert "status 7" in failed[0]["error"]
        assert ["completed"] == [r["reason"] for r in lines if r["event"] == "finished"]


class TestExitHookSpec:
    """``on_exit`` in the spec file."""

    def test_on_exit_must_be_a_list_of_strings(self, tmp_path: Path) -> None:
        """A string instead of a list is a spec error (exit 2), before anything runs."""
        hooked_agent(tmp_path, "quick", '"hooks/record.py seen.json"')
        done = cli(tmp_path, "run", "agent/hooked.toml", "--session", "x1", "-q")
        assert 2 == done.returncode
        assert "on_exit" in done.stderr and "list of strings" in done.stderr, done.stderr


class TestHookCommand:
    """How a hook's program is found, and its timeout read."""

    def test_the_program_is_found_as_execvp_would_from_the_spec_directory(self) -> None:
        """A path with a slash is the spec directory's; an absolute one and a bare name stay."""
        base = Path("/agents/monitor")
        assert ["/agents/monitor/hooks/a.sh", "x"] == hook_argv(["hooks/a.sh", "x"], base)
        assert ["/agents/monitor/a.sh"] == hook_argv(["./a.sh"], base)
        assert ["/usr/bin/logger", "-t", "a"] == hook_argv(["/usr/bin/logger", "-t", "a"], base)
        assert ["logger"] == hook_argv(["logger"], base)

    def test_the_timeout_comes_from_the_environment(self) -> None:
        """AUTONOMOUS_HOOK_TIMEOUT takes seconds or a duration; unset or empty it is 30 s."""
        assert 30.0 == hook_timeout({})
        assert 30.0 == hook_timeout({"AUTONOMOUS_HOOK_TIMEOUT": " "})
        assert 120.0 == hook_timeout({"AUTONOMOUS_HOOK_TIMEOUT": "2m"})
        assert 1.5 == hook_timeout({"AUTONOMOUS_HOOK_TIMEOUT": "1.5"})

    @pytest.mark.parametrize("value", ["soon", "0", "-5", "0s"])
    def test_a_bad_timeout_is_an_error_not_ignored(self, value: str) -> None:
        """A value that is not a positive duration is an error naming the variable."""
        with pytest.raises(ValueError, match=f"AUTONOMOUS_HOOK_TIMEOUT={value!r}"):
            hook_timeout({"AUTONOMOUS_HOOK_TIMEOUT": value})

    def test_run_and_the_daemon_refuse_a_bad_timeout(self, tmp_path: Path) -> None:
        """run refuses a spec with a hook under a bad timeout (2), as validate does (1); the
        daemon will not start with it (2)."""
        hooked_agent(tmp_path, "quick", '["hooks/record.py", "seen.json"]')
        env = {"AUTONOMOUS_HOOK_TIMEOUT": "soon"}
        done = cli(tmp_path, "run", "agent/hooked.toml", "--session", "t1", "-q", env=env)
        assert 2 == done.returncode
        assert "AUTONOMOUS_HOOK_TIMEOUT='soon'" in done.stderr, done.stderr
        checked = cli(tmp_path, "validate", "agent/hooked.toml", env=env)
        assert 1 == checked.returncode
        assert "error: " in checked.stdout and "AUTONOMOUS_HOOK_TIMEOUT" in checked.stdout
        daemon = cli(tmp_path, "daemon", "--once", env=env)
        assert 2 == daemon.returncode
        assert "AUTONOMOUS_HOOK_TIMEOUT='soon'" in daemon.stderr, daemon.stderr

    @pytest.mark.anyio
    async def test_a_hook_under_a_bad_timeout_is_not_run(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Where the variable is read at the end of a run, a bad one is a failure, reported,
        and the hook does not run with some other timeout."""
        monkeypatch.setenv("AUTONOMOUS_HOOK_TIMEOUT", "soon")
        failure = await run_hook(["true"], tmp_path, {})
        assert failure is not None and "AUTONOMOUS_HOOK_TIMEOUT='soon'" in failure, failure

    @pytest.mark.anyio
    async def test_a_blank_program_is_a_failure_not_an_error(self, tmp_path: Path) -> None:
        """An on_exit whose program is blank is reported, not raised."""
        assert "on_exit hook has no program" == await run_hook([" "], tmp_path, {})
