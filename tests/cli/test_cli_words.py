"""What the commands say: the end of a run in English, control commands that say what they
did, help that tells the whole story, and the daemon's reports printed once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from autonomous._cli._run import summary_lines

from .conftest import cli, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'


def summary(**fields: Any) -> dict[str, Any]:
    """A ``run --json`` document of a run of 3 turns, with ``fields`` changed."""
    base: dict[str, Any] = {
        "session": "a/u/s",
        "reason": "completed",
        "turns": 3,
        "input_tokens": 60,
        "cached_input_tokens": 0,
        "output_tokens": 30,
        "cost_usd": 2.7000000000000002e-05,
        "priced": True,
        "duration": 0.25,
        "done_detail": "",
        "final_text": "",
        "next_wake_at": None,
        "outcome": None,
        "result": None,
        "error": None,
    }
    return {**base, **fields}


def labels(lines: list[str]) -> dict[str, str]:
    """The summary's lines as label -> text (labels are the first column, 10 wide)."""
    return {line[:10].strip(): line[10:] for line in lines}


class TestRunSummary:
    """The lines at the end of ``run`` and ``resume``."""

    def test_a_budget_stop_says_what_ran_out_and_how_to_go_on(self) -> None:
        """'ended  out of turns (max_turns_exceeded)', and 'next step' with the command."""
        shown = labels(summary_lines(summary(reason="max_turns_exceeded"), utc=True))
        assert "out of turns (max_turns_exceeded)" == shown["ended"]
        assert shown["next step"].startswith("autonomous resume a/u/s --max-turns N")
        assert "stopped" not in shown and "continue" not in shown

    @pytest.mark.parametrize(
        ("reason", "interrupted", "ended"),
        [
            ("completed", False, "completed"),
            ("deferred", False, "deferred itself until its next wake (deferred)"),
            ("max_tokens_exceeded", False, "out of tokens (max_tokens_exceeded)"),
            ("max_cost_exceeded", False, "out of money (max_cost_exceeded)"),
            ("wallclock_exceeded", False, "out of time for this run (wallclock_exceeded)"),
            ("context_cancelled", True, "interrupted (context_cancelled)"),
            ("context_cancelled", False, "stopped on purpose (context_cancelled)"),
            (
                "retry_policy_aborted",
                False,
                "its turns kept failing (retry_policy_aborted)",
            ),
            (
                "aborted",
                False,
                "its supervisor aborted it, or a pause outlived pause_max (aborted)",
            ),
            ("lease_lost", False, "another process took the session over (lease_lost)"),
        ],
    )
    def test_every_stop_reason_reads_as_english(
        self, reason: str, interrupted: bool, ended: str
    ) -> None:
        """Each stop reason is said in words, the reason itself in parentheses."""
        lines = summary_lines(summary(reason=reason), utc=True, interrupted=interrupted)
        assert ended == labels(lines)["ended"]

    def test_the_done_detail_and_the_cost_are_lines_of_their_own(self) -> None:
        """The done tool's detail is its own line; the cost is a decimal, never float noise."""
        shown = labels(summary_lines(summary(done_detail="all done"), utc=True))
        assert ("completed", "all done") == (shown["ended"], shown["detail"])
        assert "$0.000027" == shown["cost"]
        assert "next step" not in shown  # a completed session has none


class TestControlWords:
    """What pause, unpause and stop say, and what stop's help promises."""

    def test_each_control_command_says_what_it_did(self, agent_dir: Path) -> None:
        """pause says when the session parks, unpause says it unpaused, stop says how long
        the stop lasts; none of them speaks of the wire action ('sent resume')."""
        write_spec(agent_dir, "later", "napping", extra=DEFERRING)
        assert 10 == cli(agent_dir, "run", "later.toml", "--session", "w1", "-q").returncode
        paused = cli(agent_dir, "pause", "w1").stdout.strip()
        assert paused.startswith("paused tests/tester/w1: it parks before its next turn")
        assert "unpaused tests/tester/w1" == cli(agent_dir, "unpause", "w1").stdout.strip()
        stopped = cli(agent_dir, "stop", "w1").stdout.strip()
        assert (
            "stopped tests/tester/w1: it stays stopped until "
            "`autonomous resume tests/tester/w1 --force`"
        ) == stopped

    def test_stop_help_says_the_stop_sticks(self, agent_dir: Path) -> None:
        """`stop --help` says a stop lasts until `resume --force`."""
        shown = " ".join(cli(agent_dir, "stop", "--help").stdout.split())
        assert "until `autonomous resume SESSION --force`" in shown, shown


class TestDaemonVerbose:
    def test_each_report_is_printed_once(self, agent_dir: Path) -> None:
        """With -v the report lines are on standard output once, not again as log lines on
        standard error; the library's own logs stay on standard error."""
        write_spec(agent_dir, "quick", "quick")
        done = cli(agent_dir, "daemon", "--once", "-v")
        assert 0 == done.returncode, done.stderr
        both = done.stdout + done.stderr
        assert 1 == len(re.findall("daemon_started", both)), both
        assert 1 == len(re.findall("daemon_stopped", both)), both
