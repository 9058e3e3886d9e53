"""The error behind a failed session, wherever an operator looks: the daemon's ``failed``
report, ``run --json`` (and the on_exit hook), ``ls --json`` and ``show``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autonomous import RunResult, StopReason
from autonomous._cli._run import result_summary
from eventlog import Checkpoint, SessionKey

from .conftest import cli, wait_until_due, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'
KEY = SessionKey("a", "u", "s")


def failing_session(agent_dir: Path, session: str) -> None:
    """A session that deferred itself; resumed, every model call fails."""
    write_spec(agent_dir, "fail", "deferring_then_failing", extra=DEFERRING)
    done = cli(agent_dir, "run", "fail.toml", "--session", session, "-q")
    assert 10 == done.returncode, done.stderr
    wait_until_due(agent_dir)


def reports(agent_dir: Path) -> list[dict[str, Any]]:
    """One ``daemon --once --json`` pass: its report lines."""
    done = cli(agent_dir, "daemon", "--once", "--json")
    assert 0 == done.returncode, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


class TestDaemon:
    def test_a_run_that_failed_is_reported_failed_with_its_error(self, agent_dir: Path) -> None:
        """A run the retry policy gave up on: one `failed` report (level error) with the
        reason, the totals and the error; no `finished` report."""
        failing_session(agent_dir, "f1")
        lines = reports(agent_dir)
        failed = [r for r in lines if r["event"] == "failed"]
        assert [] == [r for r in lines if r["event"] == "finished"]
        assert 1 == len(failed), lines
        assert ("error", "tests/tester/f1", "retry_policy_aborted", 2) == (
            failed[0]["level"],
            failed[0]["session"],
            failed[0]["reason"],
            failed[0]["turns"],
        )
        assert "the disk tool broke" in failed[0]["error"], failed[0]

    def test_a_finished_report_has_an_error_field(self, agent_dir: Path) -> None:
        """A run that ended well: `finished`, its error null."""
        write_spec(agent_dir, "later", "deferring", extra=DEFERRING)
        assert 10 == cli(agent_dir, "run", "later.toml", "--session", "ok", "-q").returncode
        wait_until_due(agent_dir)
        (finished,) = [r for r in reports(agent_dir) if r["event"] == "finished"]
        assert ("completed", None) == (finished["reason"], finished["error"])


class TestResultSummary:
    def test_the_checkpoint_s_error_is_preferred(self) -> None:
        """The run's final checkpoint holds the error bounded and its secrets masked: the
        summary (run --json, the hook's AUTONOMOUS_ERROR) takes it over the raw exception."""
        result = RunResult(StopReason.RETRY_POLICY_ABORTED, turns=2, error=RuntimeError("sk-x"))
        cp = Checkpoint(2, 10, 5, 0.0, "", "retry_policy_aborted", error="RuntimeError: ***")
        assert "RuntimeError: ***" == result_summary(KEY, result, cp)["error"]
        assert "RuntimeError: sk-x" == result_summary(KEY, result, None)["error"]


class TestLsAfterAFailure:
    """End to end: needs the runtime to write the error into the final checkpoint."""

    def test_ls_and_show_give_the_error_of_a_run_that_failed(self, agent_dir: Path) -> None:
        """After the daemon's failed run: ls --json and show carry the error."""
        failing_session(agent_dir, "f2")
        reports(agent_dir)
        row = next(r for r in json.loads(cli(agent_dir, "ls", "--json").stdout))
        assert "the disk tool broke" in (row["error"] or ""), row
        shown = cli(agent_dir, "show", "f2").stdout
        assert any(
            line.startswith("error     ") and "the disk tool broke" in line
            for line in shown.splitlines()
        ), shown
