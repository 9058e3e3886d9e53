"""The README's main job: ``examples/monitor.py``, offline, and with a real model but no key;
``examples/mcp_monitor.py``, the same monitor with its disk check on an MCP server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[1] / "examples" / "monitor.py"
#: The lines the example prints itself, by their label.
LABELS = ("stop reason", "detail", "turns", "tokens", "cost", "duration", "event log")


def run_example(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python examples/monitor.py --db tmp/runs.db ARGS``, with no provider key set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LITELLM_"))}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # never the internet, whatever happens
    return subprocess.run(
        [sys.executable, str(EXAMPLE), "--db", str(tmp_path / "runs.db"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_main_job_runs_offline(tmp_path: Path) -> None:
    """The scripted monitor checks, sleeps, wakes and reports: exit 0, its own lines only."""
    done = run_example(tmp_path)
    assert 0 == done.returncode, done.stderr
    lines = done.stdout.splitlines()
    assert "stop reason : completed" == lines[0]
    assert all(line.startswith((*LABELS, "checkpoints")) for line in lines), done.stdout
    assert "" == done.stderr


def test_a_real_model_without_a_key_says_so_in_one_line(tmp_path: Path) -> None:
    """No API key: the provider's own error (missing credentials) in one line, exit 1, no
    litellm banner, no log lines, no traceback."""
    done = run_example(tmp_path, "--model", "openai/gpt-4o-mini")
    assert 1 == done.returncode, done.stdout + done.stderr
    errors = [line for line in done.stdout.splitlines() if line.startswith("error")]
    assert 1 == len(errors), done.stdout
    assert "OPENAI_API_KEY" in errors[0] and "credentials" in errors[0].lower()
    allowed = (*LABELS, "checkpoints", "error")
    assert all(line.startswith(allowed) for line in done.stdout.splitlines()), done.stdout
    assert "Traceback" not in done.stderr and "Give Feedback" not in done.stdout + done.stderr


@pytest.mark.mcp
def test_the_monitor_runs_against_the_mcp_disk_server(tmp_path: Path) -> None:
    """mcp_monitor.py starts mcp_disk_server.py over stdio and completes under a PLAN gate:
    check_disk (read-only by its annotation) runs each turn; nothing on stderr."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLE.with_name("mcp_monitor.py")), "--db", str(tmp_path / "r.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "stop reason : completed" == lines[0]
    assert 3 == lines[3].count("check_disk ok"), done.stdout
    assert "" == done.stderr
