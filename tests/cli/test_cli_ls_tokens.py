"""``autonomous ls`` shows each session's input tokens, the share read from the prompt cache, and
its output tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autonomous._cli._ls import tokens_text

from .conftest import cli, write_spec


class TestTokensColumn:
    """The TOKENS column and the two ``ls --json`` fields come from the latest checkpoint."""

    def test_a_cached_session_shows_its_cached_share(self, agent_dir: Path) -> None:
        """A run whose every call read 11,904 of 12,400 prompt tokens from the cache: ls says
        96% cached, ls --json gives both counts; a run with no cache shows its tokens alone."""
        write_spec(agent_dir, "cached", "caching")
        write_spec(agent_dir, "plain", "quick")
        for spec, session in (("cached.toml", "c1"), ("plain.toml", "p1")):
            done = cli(agent_dir, "run", spec, "--session", session, "-q")
            assert 0 == done.returncode, done.stderr
        rows = {r["session_id"]: r for r in json.loads(cli(agent_dir, "ls", "--json").stdout)}
        calls = rows["c1"]["input_tokens"] // 12_400
        assert 1 <= calls
        assert (12_400 * calls, 11_904 * calls) == (
            rows["c1"]["input_tokens"],
            rows["c1"]["cached_input_tokens"],
        )
        assert 0 == rows["p1"]["cached_input_tokens"] < rows["p1"]["input_tokens"]
        listed = cli(agent_dir, "ls").stdout.splitlines()
        assert "TOKENS" in listed[0]
        cached = next(line for line in listed if "/c1 " in line)
        assert f"{12_400 * calls:,} in (96% cached) / {rows['c1']['output_tokens']} out" in cached
        plain = next(line for line in listed if "/p1 " in line)
        assert "cached" not in plain
        assert f" {rows['p1']['input_tokens']:,} in / {rows['p1']['output_tokens']} out " in plain


@pytest.mark.parametrize(
    ("used", "cached", "shown"),
    [
        (0, 0, "0 in / 1,200 out"),
        (12_400, 0, "12,400 in / 1,200 out"),
        (12_400, 11_904, "12,400 in (96% cached) / 1,200 out"),
        (1_000, 999, "1,000 in (99% cached) / 1,200 out"),  # never rounded up to all of it
        (100_000, 3, "100,000 in (<1% cached) / 1,200 out"),  # never rounded down to none
        (500, 500, "500 in (100% cached) / 1,200 out"),
    ],
)
def test_tokens_text(used: int, cached: int, shown: str) -> None:
    """The cell: input tokens with thousands separators, the cached share when there is one,
    then output tokens."""
    assert shown == tokens_text(used, cached, 1_200)
