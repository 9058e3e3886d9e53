"""The daemon processes of the fleet tests and benches: ``autonomous daemon --json`` each in its
own process group, their report lines collected as they come."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

#: The environment of every daemon: offline, no colour.
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1"}


class Daemon:
    """One ``autonomous daemon --json`` process (its own process group), its reports collected.

    ``prefix`` runs it under another command (``ip netns exec NS ...``); signals go to the
    whole group, so they reach the daemon through such wrappers. ``identity`` is the
    ``host:pid`` the daemon's brains write (its pid here unless a wrapper gives it a pid
    namespace of its own).
    """

    def __init__(
        self,
        agent_dir: Path,
        db: str,
        *options: str,
        prefix: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        name: str = "daemon",
        identity: str | None = None,
    ) -> None:
        command = [*prefix, sys.executable, "-m", "autonomous", "daemon", "--db", db, "--json"]
        self.name = name
        self.proc = subprocess.Popen(
            [*command, *options],
            cwd=agent_dir,
            env={**ENV, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.identity = identity or f"{socket.gethostname()}:{self.proc.pid}"
        self._lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(stream, pipe), daemon=True)
            for stream, pipe in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: str, pipe: Any) -> None:
        for line in pipe:
            with self._changed:
                self._lines[stream].append(line.rstrip("\n"))
                self._changed.notify_all()
        pipe.close()

    def reports(self) -> list[dict[str, Any]]:
        """The JSON lines about a session (reports, and the logs of its runs) and the
        daemon's start and stop, printed so far."""
        with self._changed:
            lines = list(self._lines["stdout"])
        found = []
        for line in lines:
            if line.startswith("{"):
                value = json.loads(line)
                if "session" in value or str(value.get("event")).startswith("daemon_"):
                    found.append(value)
        return found

    def wait_for(
        self, what: str, check: Callable[[list[dict[str, Any]]], bool], *, timeout: float
    ) -> None:
        """Wait until ``check(reports)`` holds; fails (with the output) after ``timeout`` s or
        when the daemon exited without it."""
        deadline = time.monotonic() + timeout
        while not check(self.reports()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"{self.name}: {what} never came; {self.output()}")
            with self._changed:
                self._changed.wait(0.1)

    def output(self, tail: int = 40) -> str:
        """The last lines of both streams (for failure messages)."""
        with self._changed:
            out = self._lines["stdout"][-tail:]
            err = self._lines["stderr"][-tail:]
        return "stdout:\n" + "\n".join(out) + "\nstderr:\n" + "\n".join(err)

    def signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the daemon's process group (while it runs)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signum)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM, then wait for the exit (SIGKILL if it does not come); the exit status."""
        self.signal(signal.SIGCONT)  # a frozen daemon cannot act on SIGTERM
        self.signal(signal.SIGTERM)
        try:
            return self.finish(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the whole group and reap the daemon."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.finish(10)

    def finish(self, timeout: float) -> int:
        """Wait for the exit and the end of its output; the exit status."""
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=5)
        return code


def reports_of(daemons: Iterable[Daemon], event: str) -> list[dict[str, Any]]:
    """Every ``event`` report of ``daemons``, each with the daemon's name as ``daemon``."""
    return [
        {**report, "daemon": daemon.name}
        for daemon in daemons
        for report in daemon.reports()
        if report.get("event") == event
    ]


def count_reports(daemons: Iterable[Daemon], event: str) -> dict[str, int]:
    """How many ``event`` reports each session got, over all ``daemons``."""
    counts: dict[str, int] = {}
    for daemon in daemons:
        for report in daemon.reports():
            if report.get("event") == event:
                counts[report["session"]] = counts.get(report["session"], 0) + 1
    return counts


class Fleet:
    """The daemons a test started over one log; :meth:`close` ends every one still running."""

    def __init__(self, agent_dir: Path, db: str) -> None:
        self.agent_dir = agent_dir
        self.db = db
        self.daemons: list[Daemon] = []

    def start(
        self,
        name: str,
        *,
        poll: float = 0.5,
        max_concurrent: int = 8,
        options: Sequence[str] = (),
        prefix: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        db: str | None = None,
        identity: str | None = None,
    ) -> Daemon:
        """Start one daemon over the fleet's log (or ``db``: the same log by another route)."""
        daemon = Daemon(
            self.agent_dir,
            db or self.db,
            "--poll",
            str(poll),
            "--max-concurrent",
            str(max_concurrent),
            *options,
            prefix=prefix,
            env=env,
            name=name,
            identity=identity,
        )
        self.daemons.append(daemon)
        return daemon

    def close(self) -> None:
        """SIGKILL every daemon still running (a test that wanted a clean stop did it)."""
        for daemon in self.daemons:
            daemon.kill()


_HELP: list[str] = []


def lease_options(ttl: float) -> list[str]:
    """``--lease-ttl TTL`` when this branch's daemon takes it (the fleet daemon's own leases);
    the spec's ``lease_ttl`` says the same to a daemon that does not."""
    if not _HELP:
        shown = subprocess.run(
            [sys.executable, "-m", "autonomous", "daemon", "--help"],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        _HELP.append(shown.stdout)
    return ["--lease-ttl", str(ttl)] if "--lease-ttl" in _HELP[0] else []
