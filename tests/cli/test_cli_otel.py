"""OpenTelemetry from the command line: the standard ``OTEL_*`` variables turn it on for ``run``,
``resume`` and ``daemon`` when the SDK is installed (the command configures the SDK from them;
the library never configures a global provider).

Each test runs the command in a subprocess, with the SDK's own console exporters (offline), and
reads the spans and metrics they print on standard error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import ENV, wait_until_due, write_spec

pytestmark = pytest.mark.otel

#: What turns tracing on: the SDK's console exporter, and a service name for the resource.
TRACING = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "agents"}


def command(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m autonomous ARGS`` in ``cwd`` with ``env`` added to the tests' environment
    (from which every ``OTEL_*`` variable of the machine is left out)."""
    base = {k: v for k, v in ENV.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-m", "autonomous", *args],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def exported(text: str) -> list[dict[str, Any]]:
    """The JSON objects the console exporters printed in ``text`` (one indented object after
    another, between whatever else the command wrote there)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    at = 0
    while (at := text.find("{\n", at)) >= 0:
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at += 1
            continue
        if isinstance(value, dict):
            found.append(value)
        at = end
    return found


def spans(text: str) -> list[dict[str, Any]]:
    """The spans among :func:`exported`."""
    return [o for o in exported(text) if "context" in o and "name" in o]


class TestTracing:
    """OTEL_TRACES_EXPORTER names the exporters; the command sets up the SDK's tracer."""

    def test_run_exports_the_runs_spans_nested_after_the_genai_conventions(
        self, agent_dir: Path
    ) -> None:
        """``run`` with OTEL_TRACES_EXPORTER=console prints each span of the run on standard
        error: ``invoke_agent``, its turn and its ``chat`` call in one trace, the chat under
        the turn under the agent, the resource named by OTEL_SERVICE_NAME; standard output
        keeps the command's own JSON."""
        write_spec(agent_dir, "quick", "quick")
        done = command(agent_dir, "run", "quick.toml", "--json", "-q", env=TRACING)
        assert 0 == done.returncode, done.stderr
        assert "completed" == json.loads(done.stdout)["reason"]
        found = {span["name"]: span for span in spans(done.stderr)}
        agent, turn = found["invoke_agent quick"], found["autonomous.turn"]
        (chat,) = [span for name, span in found.items() if name.startswith("chat ")]
        assert 1 == len({s["context"]["trace_id"] for s in (agent, turn, chat)})
        assert agent["context"]["span_id"] == turn["parent_id"]
        assert turn["context"]["span_id"] == chat["parent_id"]
        assert "chat" == chat["attributes"]["gen_ai.operation.name"]
        assert "tests/tester/" in agent["attributes"]["gen_ai.conversation.id"]
        assert "agents" == agent["resource"]["attributes"]["service.name"]

    def test_the_daemon_exports_the_spans_of_the_sessions_it_resumes(self, agent_dir: Path) -> None:
        """``daemon --once`` with the same variables exports the resumed run's spans."""
        write_spec(agent_dir, "later", "deferring", extra='[scheduler]\nkind = "exit"\n')
        started = command(agent_dir, "run", "later.toml", "--session", "d1", "-q", env={})
        assert 10 == started.returncode, started.stderr
        wait_until_due(agent_dir)
        done = command(agent_dir, "daemon", "--once", "--json", env=TRACING)
        assert 0 == done.returncode, done.stderr
        names = [span["name"] for span in spans(done.stderr)]
        assert "invoke_agent later" in names, names
        assert any(name.startswith("chat ") for name in names), names
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        assert "finished" in [line["event"] for line in lines]

    def test_without_the_variables_nothing_is_set_up(self, agent_dir: Path) -> None:
        """Without OTEL_TRACES_EXPORTER no span is exported (the library stays off)."""
        write_spec(agent_dir, "quick", "quick")
        done = command(agent_dir, "run", "quick.toml", "-q", env={})
        assert (0, []) == (done.returncode, spans(done.stderr))

    def test_an_exporter_no_installed_package_provides_is_refused(self, agent_dir: Path) -> None:
        """An exporter name that no installed package provides fails the command before the
        run, as a usage error that names the variable and the name."""
        write_spec(agent_dir, "quick", "quick")
        done = command(
            agent_dir, "run", "quick.toml", "-q", env={"OTEL_TRACES_EXPORTER": "no_such_one"}
        )
        assert 2 == done.returncode
        assert "OTEL_TRACES_EXPORTER" in done.stderr and "no_such_one" in done.stderr

    def test_the_sdk_disabled_sets_up_nothing(self, agent_dir: Path) -> None:
        """OTEL_SDK_DISABLED=true wins: nothing is exported."""
        write_spec(agent_dir, "quick", "quick")
        done = command(
            agent_dir, "run", "quick.toml", "-q", env={**TRACING, "OTEL_SDK_DISABLED": "true"}
        )
        assert (0, []) == (done.returncode, spans(done.stderr))


class TestMetrics:
    """OTEL_METRICS_EXPORTER names the metric exporters."""

    def test_run_exports_the_genai_histograms_at_its_exit(self, agent_dir: Path) -> None:
        """With OTEL_METRICS_EXPORTER=console the run's metrics are exported when the command
        exits: the GenAI token usage histogram among them."""
        write_spec(agent_dir, "quick", "quick")
        done = command(
            agent_dir, "run", "quick.toml", "-q", env={"OTEL_METRICS_EXPORTER": "console"}
        )
        assert 0 == done.returncode, done.stderr
        names = {
            metric["name"]
            for batch in exported(done.stderr)
            for resource in batch.get("resource_metrics", [])
            for scope in resource["scope_metrics"]
            for metric in scope["metrics"]
        }
        assert {"gen_ai.client.token.usage", "autonomous.turns"} <= names, names
