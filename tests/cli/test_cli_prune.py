"""``autonomous prune``: finished sessions lose their old events; ls, show and resume still work."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from eventlog import Checkpoint, UserMessage

from .conftest import BRAINS, append_events, cli, session_events, write_spec

DEFERRING = '[scheduler]\nkind = "exit"\n'


def prune_json(cwd: Path, *args: str) -> dict[str, Any]:
    """``prune ARGS --json`` succeeded; its document."""
    done = cli(cwd, "prune", *args, "--json")
    assert 0 == done.returncode, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def without_status(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``ls --json`` rows without their status (which moves with the clock: deferred, due)."""
    return [{k: v for k, v in row.items() if k != "status"} for row in rows]


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    """An agent directory whose log holds a completed session ``q1`` and a deferred ``d1``."""
    shutil.copy(BRAINS, tmp_path / "brains.py")
    write_spec(tmp_path, "quick", "quick")
    write_spec(tmp_path, "later", "deferring", extra=DEFERRING)
    assert 0 == cli(tmp_path, "run", "quick.toml", "--session", "q1", "-q").returncode
    assert 10 == cli(tmp_path, "run", "later.toml", "--session", "d1", "-q").returncode
    return tmp_path


class TestPrune:
    """prune --before: what goes, what stays, and what the other commands see afterwards."""

    def test_recent_sessions_stay(self, finished: Path) -> None:
        """Sessions that finished after the cut-off are not touched."""
        events = session_events(finished, "q1")

        result = prune_json(finished, "--before", "30d")

        assert (0, 0, []) == (result["sessions"], result["events"], result["pruned"])
        assert events == session_events(finished, "q1")

    def test_dry_run_lists_and_keeps(self, finished: Path) -> None:
        """--dry-run names the completed session and how many events would go; none go."""
        events = session_events(finished, "q1")

        result = prune_json(finished, "--before", "0s", "--dry-run")

        gone = len(events) - 2  # the spec note and the final checkpoint stay
        expected = [{"session": "tests/tester/q1", "events": gone, "stop_reason": "completed"}]
        assert expected == [
            {k: v for k, v in row.items() if k != "updated_at"} for row in result["pruned"]
        ]
        assert (True, 1, gone) == (result["dry_run"], result["sessions"], result["events"])
        assert events == session_events(finished, "q1")

    def test_prune_keeps_the_summary(self, finished: Path) -> None:
        """After a prune, ls still lists both sessions as before; the deferred one keeps all."""
        listed = json.loads(cli(finished, "ls", "--json").stdout)
        deferred = session_events(finished, "d1")

        result = prune_json(finished, "--before", "0s")

        assert (False, ["tests/tester/q1"]) == (
            result["dry_run"],
            [row["session"] for row in result["pruned"]],
        )
        after = json.loads(cli(finished, "ls", "--json").stdout)
        assert without_status(listed) == without_status(after)  # d1 turns due meanwhile
        assert ["completed"] == [row["status"] for row in after if row["session_id"] == "q1"]
        assert deferred == session_events(finished, "d1")

    def test_show_and_resume_after_a_prune(self, finished: Path) -> None:
        """show gives the spec note and the final checkpoint; resume says it completed."""
        prune_json(finished, "--before", "0s")

        shown = json.loads(cli(finished, "show", "q1", "--json").stdout)
        resumed = cli(finished, "resume", "q1", "--json", "-q")

        assert ["note", "checkpoint"] == [event["kind"] for event in shown]
        assert (0, "completed") == (resumed.returncode, json.loads(resumed.stdout)["reason"])

    def test_prints_counts(self, finished: Path) -> None:
        """Without --json, prune says how many sessions and events went, one line each."""
        done = cli(finished, "prune", "--before", "0s")

        assert 0 == done.returncode, done.stderr
        assert "pruned 1 session" in done.stdout
        assert "tests/tester/q1" in done.stdout

    def test_an_iso_date_is_a_cut_off(self, finished: Path) -> None:
        """--before takes a date: one long ago prunes nothing."""
        result = prune_json(finished, "--before", "2000-01-01")

        assert ("2000-01-01T00:00:00+00:00", 0) == (result["before"], result["sessions"])

    def test_a_date_without_a_zone_is_local_time(self, finished: Path) -> None:
        """As ``ls --since`` reads it: midnight in UTC+05:30 is 18:30 UTC the day before."""
        done = cli(finished, "prune", "--before", "2000-01-01", "--json", env={"TZ": "IST-05:30"})
        assert 0 == done.returncode, done.stderr
        before = json.loads(done.stdout)["before"]
        assert datetime.fromisoformat(before) == datetime(1999, 12, 31, 18, 30, tzinfo=UTC)

    @pytest.mark.parametrize("text", ["soon", "2999-01-01"])
    def test_bad_cut_off_is_a_usage_error(self, finished: Path, text: str) -> None:
        """A cut-off that is neither a duration nor a past date is refused, naming it."""
        done = cli(finished, "prune", "--before", text)

        assert (2, True) == (done.returncode, text in done.stderr)
        assert "Traceback" not in done.stderr

    def test_no_log_is_an_error(self, tmp_path: Path) -> None:
        """prune never creates a log."""
        done = cli(tmp_path, "prune", "--before", "30d")

        assert (2, False) == (done.returncode, (tmp_path / "autonomous.db").exists())


class TestPruneInterrupted:
    """prune --interrupted: sessions whose run crashed or was cancelled, never resumed."""

    def test_help_says_what_interrupted_means(self, tmp_path: Path) -> None:
        """--help names the flag and what it also prunes."""
        shown = " ".join(cli(tmp_path, "prune", "--help").stdout.split())
        assert "--interrupted" in shown
        assert "also prune interrupted sessions" in shown, shown

    def test_interrupted_sessions_go_only_with_the_flag(self, finished: Path) -> None:
        """A crashed session (a checkpoint with no stop reason, nobody holding it) is left
        alone by a plain prune and pruned with --interrupted; the deferred one stays.
        Needs the store's prune(..., interrupted=True)."""
        # crashed mid-run: a turn, then its checkpoint (which a prune keeps)
        append_events(finished, "c1", UserMessage("go", 1), Checkpoint(2, 10, 5, 0.0, "go"))
        plain = prune_json(finished, "--before", "0s", "--dry-run")
        assert ["tests/tester/q1"] == [row["session"] for row in plain["pruned"]]

        result = prune_json(finished, "--before", "0s", "--interrupted")

        pruned = sorted(row["session"] for row in result["pruned"])
        assert ["tests/tester/c1", "tests/tester/q1"] == pruned
        assert "tests/tester/d1" not in pruned
