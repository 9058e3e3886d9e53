"""Honest numbers and strict specs everywhere: an unpriced session's cost is shown as unpriced,
and the daemon is as strict about a spec as ``run`` is."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import cli, session_events, wait_until_due, write_spec

PRICED = "[pricing]\ninput_per_mtok = 0.15\noutput_per_mtok = 0.6\n"


def ls_row(agent_dir: Path, session: str) -> dict[str, object]:
    """The session's ``ls --json`` row."""
    rows = json.loads(cli(agent_dir, "ls", "--json").stdout)
    row: dict[str, object] = next(r for r in rows if r["session_id"] == session)
    return row


class TestUnpriced:
    """A model with no price (none in litellm's table, no [pricing]) counts no cost."""

    def test_an_unpriced_session_says_so_instead_of_zero(self, agent_dir: Path) -> None:
        """ls, ls --json and the run's summary say unpriced, not $0."""
        write_spec(agent_dir, "free", "quick")
        done = cli(agent_dir, "run", "free.toml", "--session", "u1", "-q")
        assert 0 == done.returncode, done.stderr
        assert "cost      unpriced" in done.stdout
        assert (False, 0.0) == (
            ls_row(agent_dir, "u1")["priced"],
            ls_row(agent_dir, "u1")["cost_usd"],
        )
        listed = cli(agent_dir, "ls").stdout.splitlines()
        assert "unpriced" in next(line for line in listed if "/u1 " in line)
        shown = cli(agent_dir, "show", "u1").stdout
        assert "cost=unpriced" in shown

    def test_a_priced_session_shows_its_cost(self, agent_dir: Path) -> None:
        """With [pricing] the cost is a dollar amount and the row says priced."""
        write_spec(agent_dir, "paid", "quick", extra=PRICED)
        done = cli(agent_dir, "run", "paid.toml", "--session", "p1", "-q")
        assert 0 == done.returncode, done.stderr
        assert "cost      $0.0000" in done.stdout
        row = ls_row(agent_dir, "p1")
        assert row["priced"] is True and isinstance(row["cost_usd"], float) and row["cost_usd"] > 0
        assert "unpriced" not in cli(agent_dir, "ls").stdout


class TestDaemonIsStrict:
    """The daemon checks a session's spec as `run` does before it resumes it."""

    def test_a_spec_edited_into_errors_is_reported_not_run(self, agent_dir: Path) -> None:
        """A missing steering file (which only the strict checks catch) and a misspelt key:
        one failed report naming both; no turn runs."""
        spec = write_spec(agent_dir, "later", "deferring", extra='[scheduler]\nkind = "exit"\n')
        done = cli(agent_dir, "run", "later.toml", "--session", "e1", "-q")
        assert 10 == done.returncode, done.stderr
        text = spec.read_text().replace("max_turns", "max_turnz")
        spec.write_text(text.replace("tools = [", 'steering_files = ["gone.md"]\ntools = ['))
        wait_until_due(agent_dir)
        daemon = cli(agent_dir, "daemon", "--once", "--json")
        reports = [json.loads(line) for line in daemon.stdout.splitlines()]
        failed = [r for r in reports if r["event"] == "failed"]
        assert 1 == len(failed), reports
        assert "max_turnz" in failed[0]["error"] and "did you mean" in failed[0]["error"]
        assert "gone.md" in failed[0]["error"], failed[0]["error"]
        turns = [
            e["payload"]["turn"]
            for e in session_events(agent_dir, "e1")
            if e["kind"] == "user_message"
        ]
        assert [1] == turns
