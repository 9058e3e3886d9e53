"""What an operator looks at: progress lines, times with their zone, ls filters, show, follow."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import cli, write_spec

SLEEPING = '[scheduler]\nkind = "sleep"\n'
#: A zone of this machine's that is not UTC, so that local and UTC times differ.
INDIA = {"TZ": "IST-05:30"}
LOCAL_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+05:30"


class TestProgressLines:
    def test_a_pipe_gets_one_plain_line_per_turn_sleep_and_wake(self, agent_dir: Path) -> None:
        """On a pipe: a line per finished turn, the scheduled sleep with its wake time (relative,
        then local with its zone), the wake; no terminal control codes."""
        write_spec(agent_dir, "nap", "deferring", extra=SLEEPING)
        done = cli(agent_dir, "run", "nap.toml", "--session", "p1", env=INDIA)
        assert 0 == done.returncode, done.stderr
        lines = done.stderr.splitlines()[1:]
        assert re.fullmatch(r"turn 1 \| tokens 20 in / 10 out \| \$0\.000000 \| left: .*", lines[0])
        assert re.fullmatch(rf"next turn in 1s \({LOCAL_TIME}\)", lines[1]), lines
        assert ["woke after turn 1"] == lines[2:3]
        assert lines[3].startswith("turn 2 | tokens 40 in / 20 out")
        assert "\x1b" not in done.stderr
