"""A spec edited after its sessions started: ls shows them blocked and says why, and
``autonomous adopt`` records the new spec for them without running them; the daemon then
runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .conftest import cli, session_events, wait_until_due, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'


def deferred(agent_dir: Path, spec: str, *sessions: str) -> Path:
    """Run the deferring agent of ``spec`` once per session: each defers, due in a second."""
    path = write_spec(agent_dir, spec, "deferring", extra=DEFERRING)
    for session in sessions:
        done = cli(agent_dir, "run", f"{spec}.toml", "--session", session, "-q")
        assert 10 == done.returncode, done.stderr
    return path


def edit(path: Path) -> None:
    """A one-word edit of a spec file."""
    path.write_text(path.read_text().replace("You are a test agent.", "You are an agent."))


def rows(agent_dir: Path) -> dict[str, dict[str, Any]]:
    """``ls --json``'s rows by session id."""
    return {r["session_id"]: r for r in json.loads(cli(agent_dir, "ls", "--json").stdout)}


def daemon_events(agent_dir: Path) -> list[dict[str, Any]]:
    """One ``daemon --once --json`` pass: its report lines."""
    done = cli(agent_dir, "daemon", "--once", "--json")
    assert 0 == done.returncode, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


class TestBlocked:
    """ls after an edit."""

    def test_an_edited_spec_blocks_its_sessions_with_the_way_out(self, agent_dir: Path) -> None:
        """Due sessions of an edited spec are blocked, not due: ls says so and names the fix;
        the daemon's failure names `autonomous adopt` too."""
        spec = deferred(agent_dir, "later", "e1")
        wait_until_due(agent_dir)
        edit(spec)
        row = rows(agent_dir)["e1"]
        fix = f"autonomous adopt --spec {spec.resolve()} tests/tester/e1"
        assert "blocked" == row["status"]
        assert {"why": "spec_changed", "spec": str(spec.resolve()), "fix": fix} == row["blocked"]
        assert f"spec changed: {fix}" in cli(agent_dir, "ls").stdout
        failed = [e for e in daemon_events(agent_dir) if e["event"] == "failed"]
        assert 1 == len(failed) and fix in failed[0]["error"], failed
        assert ["blocked"] == [rows(agent_dir)["e1"]["status"]]  # still, after the daemon

    def test_a_missing_spec_blocks_too(self, agent_dir: Path) -> None:
        """A spec file that is gone: blocked, the fix names a new path."""
        deferred(agent_dir, "later", "e2").unlink()
        row = rows(agent_dir)["e2"]
        assert ("blocked", "spec_missing") == (row["status"], row["blocked"]["why"])
        assert "autonomous adopt --spec NEW_PATH tests/tester/e2" == row["blocked"]["fix"]

    def test_an_unchanged_spec_blocks_nothing(self, agent_dir: Path) -> None:
        """The spec as recorded: deferred (or due), never blocked."""
        deferred(agent_dir, "later", "e3")
        assert rows(agent_dir)["e3"]["status"] in ("deferred", "due")
        assert rows(agent_dir)["e3"]["blocked"] is None


class TestAdopt:
    """``autonomous adopt --spec PATH KEY... | --all``."""

    def test_adopt_records_the_spec_and_the_daemon_runs_the_session(self, agent_dir: Path) -> None:
        """adopt records the edited spec without running anything; the session is due again
        and the next daemon pass runs it to its end."""
        spec = deferred(agent_dir, "later", "a1")
        wait_until_due(agent_dir)
        edit(spec)
        turns = len(session_events(agent_dir, "a1"))
        done = cli(agent_dir, "adopt", "--spec", "later.toml", "a1")
        assert 0 == done.returncode, done.stderr
        assert f"adopted {spec.resolve()} for tests/tester/a1" in done.stdout
        assert turns + 1 == len(session_events(agent_dir, "a1"))  # the spec note, no turn
        assert "due" == rows(agent_dir)["a1"]["status"]
        finished = [e for e in daemon_events(agent_dir) if e["event"] == "finished"]
        assert ["completed"] == [e["reason"] for e in finished]

    def test_all_adopts_every_changed_session_of_that_spec_only(self, agent_dir: Path) -> None:
        """--all: the sessions recorded with that path whose spec changed; another spec's
        sessions, and a completed one, are left as they are. --json lists them."""
        spec = deferred(agent_dir, "later", "b1", "b2", "b3")
        other = deferred(agent_dir, "other", "c1")
        wait_until_due(agent_dir)
        assert 0 == cli(agent_dir, "resume", "b3", "-q").returncode  # completed
        edit(spec)
        edit(other)
        done = cli(agent_dir, "adopt", "--spec", "later.toml", "--all", "--json")
        assert 0 == done.returncode, done.stderr
        result = json.loads(done.stdout)
        assert str(spec.resolve()) == result["spec"]
        assert ["tests/tester/b1", "tests/tester/b2"] == sorted(result["adopted"])
        statuses = {k: r["status"] for k, r in rows(agent_dir).items()}
        assert ("due", "due", "completed", "blocked") == (
            statuses["b1"],
            statuses["b2"],
            statuses["b3"],
            statuses["c1"],
        )

    def test_adopt_refuses_a_broken_spec_and_records_nothing(self, agent_dir: Path) -> None:
        """A spec that does not load: a usage error (2), nothing recorded, still blocked."""
        spec = deferred(agent_dir, "later", "d1")
        spec.write_text('name = "later"\n')  # no model
        before = len(session_events(agent_dir, "d1"))
        done = cli(agent_dir, "adopt", "--spec", "later.toml", "d1")
        assert 2 == done.returncode
        assert "model" in done.stderr, done.stderr
        assert before == len(session_events(agent_dir, "d1"))

    def test_adopt_needs_sessions_or_all(self, agent_dir: Path) -> None:
        """Neither sessions nor --all, or both: a usage error."""
        deferred(agent_dir, "later", "u1")
        assert 2 == cli(agent_dir, "adopt", "--spec", "later.toml").returncode
        assert 2 == cli(agent_dir, "adopt", "--spec", "later.toml", "--all", "u1").returncode
