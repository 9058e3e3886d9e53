"""Helpers of the MCP tests: the toolbox server over stdio and over streamable HTTP, and runs
on a scripted model that record what each model call was offered."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from autonomous import Agent, ModelResponse, Tool
from autonomous.mcp import MCPServer
from autonomous.testing import reply

ROOT = Path(__file__).resolve().parents[2]
TOOLBOX = ["-m", "tests.mcp_servers.toolbox"]


def toolbox(tmp_path: Path, *, name: str | None = None, once: bool = False) -> MCPServer:
    """The toolbox server over stdio, counting its starts in ``tmp_path/starts`` (and, with
    ``once``, refusing to start again)."""
    env = {"STARTS_FILE": str(tmp_path / "starts")}
    if once:
        env["START_ONCE"] = "1"
    return MCPServer.stdio(sys.executable, TOOLBOX, env=env, cwd=ROOT, name=name)


class Offered:
    """A scripted model step that keeps the tool names and messages of every call."""

    def __init__(self, *answers: ModelResponse) -> None:
        self.answers = list(answers)
        self.tools: list[list[str]] = []
        self.specs: list[list[dict[str, Any]]] = []
        self.sent: list[list[dict[str, Any]]] = []

    def __call__(self, messages: Sequence[Any], tools: Sequence[Any]) -> ModelResponse:
        self.tools.append([t["function"]["name"] for t in tools])
        self.specs.append(list(tools))
        self.sent.append([dict(m) for m in messages])
        return self.answers.pop(0) if self.answers else reply("ok")

    def results(self) -> list[str]:
        """The tool results of the last call's conversation, in order."""
        return [m["content"] for m in self.sent[-1] if m["role"] == "tool"]


def agent(model: Any, servers: Sequence[MCPServer], tools: Sequence[Tool] = (), **kw: Any) -> Any:
    """A build function: ``tools`` and the run's own next to the servers' tools."""

    def build(extra: list[Tool], session_id: str | None = None) -> Agent:
        return Agent(
            model,
            instructions="Use the tools.",
            tools=[*tools, *extra],
            mcp_servers=servers,
            **kw,
        )

    return build


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def http_toolbox(tmp_path: Path) -> Iterator[str]:
    """The toolbox over streamable HTTP on 127.0.0.1, in a subprocess; its URL."""
    port = free_port()
    env = {"STARTS_FILE": str(tmp_path / "starts"), "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen(
        [sys.executable, *TOOLBOX, "--http", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the HTTP toolbox exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the HTTP toolbox did not listen within 30 s")
