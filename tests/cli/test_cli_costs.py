"""Costs as decimals (``0.000027``), never float noise (``2.7000000000000002e-05``): in the
tables, in ``--json`` (a JSON number) and in the environment of ``on_exit`` hooks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autonomous._cli._common import json_text
from autonomous._cli._decimals import decimal_text, usd
from autonomous._cli._hooks import hook_environment
from eventlog import Checkpoint

from .conftest import append_events, cli, write_spec

#: A sum of three costs as floats add them up.
NOISY = 2.7000000000000002e-05
PRICED = "[pricing]\ninput_per_mtok = 0.2\noutput_per_mtok = 0.6\n"


class TestDecimals:
    """The formatting itself."""

    @pytest.mark.parametrize(
        ("number", "text"),
        [
            (usd(NOISY), "0.000027"),
            (usd(0.1 + 0.2), "0.3"),
            (3e-05, "0.00003"),
            (0.5, "0.5"),
            (0.0, "0.0"),
            (12.25, "12.25"),
            (1e-10, "0.0000000001"),
            (1e300, "1e+300"),  # positional would be 300 digits: left as it is
        ],
    )
    def test_decimal_text(self, number: float, text: str) -> None:
        """Positional notation, as short as the float's own repr."""
        assert text == decimal_text(number)

    def test_json_text_is_json_with_decimal_numbers(self) -> None:
        """Floats come out positional; everything else as json.dumps writes it; it parses
        back to the same values."""
        value = {"cost_usd": usd(NOISY), "n": [1, True, None, "é\n"], "nested": {"x": 3e-05}}
        text = json_text(value)
        assert '{"cost_usd": 0.000027, "n": [1, true, null, "é\\n"], "nested": {"x": 0.00003}}' == (
            text
        )
        assert value == json.loads(text)


class TestWhereCostsShow:
    """The commands."""

    def test_run_and_ls_json_print_the_cost_as_a_decimal(self, agent_dir: Path) -> None:
        """A priced run of three turns: run --json and ls --json say 0.00003, not 3e-05."""
        write_spec(agent_dir, "loop", "looping", max_turns=3, extra=PRICED)
        done = cli(agent_dir, "run", "loop.toml", "--session", "c1", "--json", "-q")
        assert 11 == done.returncode, done.stderr
        assert '"cost_usd": 0.00003,' in done.stdout, done.stdout
        assert '"cost_usd": 0.00003,' in cli(agent_dir, "ls", "--json").stdout

    def test_ls_rounds_away_the_noise_of_a_stored_sum(self, agent_dir: Path) -> None:
        """A checkpoint whose cost is a noisy sum: ls --json and the table say 0.000027."""
        append_events(agent_dir, "n1", Checkpoint(3, 60, 30, NOISY, "continue", "completed"))
        listed = cli(agent_dir, "ls", "--json").stdout
        assert '"cost_usd": 0.000027,' in listed, listed
        assert "$0.000027" in cli(agent_dir, "ls").stdout

    def test_a_hook_gets_the_cost_as_a_decimal(self, tmp_path: Path) -> None:
        """AUTONOMOUS_COST_USD is 0.000027."""
        summary = {
            "session": "a/u/s",
            "reason": "completed",
            "outcome": None,
            "done_detail": "",
            "turns": 3,
            "cost_usd": NOISY,
            "next_wake_at": None,
            "error": None,
        }
        assert "0.000027" == hook_environment(summary, tmp_path)["AUTONOMOUS_COST_USD"]
