"""Reading spec files: lines of keys, durations, "did you mean", the [retry] table."""

from __future__ import annotations

from pathlib import Path

import pytest

from autonomous import ConfigurationError
from autonomous.retry import TransientRetry, transient
from autonomous.spec._lines import key_lines
from autonomous.spec._reader import load_spec, read_spec
from autonomous.spec._validate import validate

from .conftest import write_spec


class TestKeyLines:
    """key_lines finds the line of each table and key."""

    def test_tables_keys_and_dotted_keys(self) -> None:
        """Top-level keys, table headers, keys in tables, dotted and quoted keys."""
        text = (
            'name = "a"\n\n[budgets]\nmax_turns = 3\n# a comment\n[litellm]\n"x.y" = 1\na.b = 2\n'
        )
        assert {
            "name": 1, "budgets": 3, "budgets.max_turns": 4, "litellm": 6, "litellm.x.y": 7,
            "litellm.a.b": 8,
        } == key_lines(text)  # fmt: skip

    def test_multi_line_strings_and_arrays_are_skipped(self) -> None:
        """Lines inside a multi-line string or array are not keys, whatever they look like."""
        text = (
            'instructions = """\nfake = 1\n[fake]\n"""\n'
            'tools = [\n  "a:b",  # ] not the end\n  { ref = "c:d" },\n]\n'
            "steering = '''\nalso = 2'''\nafter = 3\n"
        )
        assert {"instructions": 1, "tools": 5, "steering": 9, "after": 11} == key_lines(text)

    def test_a_repeated_key_keeps_its_first_line(self) -> None:
        """The first place a key is set is the one reported."""
        assert {"a": 1, "t": 2, "t.k": 3} == key_lines("a = 1\n[t]\nk = 1\n[t]\nk = 2\n")


class TestProblemsCarryLines:
    """Every problem names the file, the line and the key."""

    def test_all_errors_at_once_with_lines_and_a_suggestion(self, in_process: Path) -> None:
        """Two misspelt keys and a bad value: three errors, each with its line."""
        path = in_process / "s.toml"
        path.write_text(
            'model = "scripted:brains:quick"\nmodle = 1\n[budgets]\nmax_turn = 3\n'
            "max_wallclock = -5\n"
        )
        with pytest.raises(ConfigurationError) as caught:
            load_spec(path)
        message = str(caught.value)
        assert f"{path}:2: modle: unknown key; did you mean 'model'?" in message
        assert f"{path}:4: budgets.max_turn: unknown key; did you mean 'max_turns'?" in message
        assert f"{path}:5: budgets.max_wallclock: must be seconds >= 0" in message

    def test_invalid_toml_names_its_line(self, tmp_path: Path) -> None:
        """tomllib's position becomes the problem's line."""
        path = tmp_path / "x.toml"
        path.write_text('name = "x"\nmodel = [unclosed\n')
        _, problems = read_spec(path)
        assert [2] == [p.line for p in problems]
        assert problems[0].where == f"{path}:2"

    def test_a_key_with_no_line_of_its_own_gets_its_table(self, in_process: Path) -> None:
        """A missing key has no line, and an inline table's key is reported at its array."""
        path = in_process / "t.toml"
        path.write_text('name = "t"\ntools = [{ ref = "nocolon" }]\n')
        _, problems = read_spec(path)
        assert {("model", None), ("tools[0]", 2)} == {
            (p.where.split(": ")[-1], p.line) for p in problems
        }


class TestDurations:
    """Seconds in a spec may be written as durations."""

    def test_durations_wherever_seconds_are(self, in_process: Path) -> None:
        """Budgets, run options, scheduler caps and tool timeouts take 90s, 30m, 2h."""
        path = write_spec(
            in_process,
            "d",
            "quick",
            extra='per_turn_timeout = "90s"\n[run]\npause_max = "1h30m"\n'
            '[scheduler]\nkind = "sleep"\nmax_defer = "30m"\n',
        )
        path.write_text(
            path.read_text()
            .replace("max_wallclock = 60", 'max_wallclock = "2h"')
            .replace('tools = ["brains:tick"]', 'tools = [{ ref = "brains:tick", timeout = "1m" }]')
        )
        spec = load_spec(path)
        assert (7200.0, 90.0) == (spec.budgets["max_wallclock"], spec.budgets["per_turn_timeout"])
        assert (5400.0, 1800.0) == (spec.run["pause_max"], spec.max_defer)
        assert 60.0 == spec.tools[0].timeout

    def test_a_bad_duration_is_an_error_naming_the_forms(self, in_process: Path) -> None:
        """'2 hours' is refused with the accepted forms."""
        path = write_spec(in_process, "b", "quick")
        path.write_text(path.read_text().replace("max_wallclock = 60", 'max_wallclock = "2 hours"'))
        _, problems = read_spec(path)
        assert ["budgets.max_wallclock"] == [p.where.split(": ")[-1] for p in problems]
        assert 'a duration such as "30m"' in problems[0].message


class TestHistoryOptions:
    """The [run] table takes the history window's options, checked like the keywords."""

    def test_history_options_reach_the_run(self, in_process: Path) -> None:
        """history, history_keep_turns and history_summary_model go to the entry points."""
        path = write_spec(
            in_process,
            "h",
            "quick",
            extra='[run]\nhistory_turns = 40\nhistory = "blocks"\nhistory_keep_turns = 20\n'
            'history_summary_model = "openai/gpt-4o-mini"\n',
        )
        options = load_spec(path).run_options()
        assert (40, "blocks", 20, "openai/gpt-4o-mini") == (
            options["history_turns"],
            options["history"],
            options["history_keep_turns"],
            options["history_summary_model"],
        )

    def test_a_bad_history_mode_fails_validation(self, in_process: Path) -> None:
        """An unknown history mode is an error naming the modes there are."""
        path = write_spec(in_process, "r", "quick", extra='[run]\nhistory = "rolling"\n')
        errors = [p.message for p in validate(path) if p.severity == "error"]
        assert ["history must be 'blocks' or 'sliding', got 'rolling'"] == errors


class TestRetryTable:
    """The [retry] table makes the run's retry policy."""

    def test_without_the_table_the_default_policy_runs(self, in_process: Path) -> None:
        """No [retry]: transient() with its defaults is the run's retry_policy."""
        spec = load_spec(write_spec(in_process, "r", "quick"))
        assert transient() == spec.retry == spec.run_options()["retry_policy"]

    def test_the_table_sets_the_policy(self, in_process: Path) -> None:
        """attempts, base, cap (durations too), jitter and max_retry_after."""
        extra = (
            '[retry]\nattempts = 3\nbase = 0.5\ncap = "2m"\njitter = false\n'
            'max_retry_after = "5m"\n'
        )
        spec = load_spec(write_spec(in_process, "r", "quick", extra=extra))
        assert TransientRetry(3, 0.5, 120.0, False, 300.0) == spec.retry

    def test_zero_attempts_turns_retries_off(self, in_process: Path) -> None:
        """attempts = 0: no retry policy, a failed turn ends the run."""
        spec = load_spec(write_spec(in_process, "r", "quick", extra="[retry]\nattempts = 0\n"))
        assert spec.retry is None and "retry_policy" not in spec.run_options()

    def test_a_misspelt_retry_key_is_an_error(self, in_process: Path) -> None:
        """atempts: unknown key, did you mean 'attempts'."""
        path = write_spec(in_process, "r", "quick", extra="[retry]\natempts = 2\n")
        _, problems = read_spec(path)
        assert ["unknown key; did you mean 'attempts'?"] == [
            p.message.split(" the known")[0] for p in problems
        ]
