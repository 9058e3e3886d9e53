"""Fixtures of the CLI tests: an agent directory with specs, and the command, in this process or
in subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from autonomous._cli import _main
from eventlog import Event, LeaseHolder, Payload, SessionKey, SqliteEventLog
from eventlog.codec import event_to_dict

from ..autonomous.stores import DurableLog, DurableStore, open_store

BRAINS = Path(__file__).with_name("brains.py")
#: The environment of every subprocess: offline, no colour, the tests' identity.
ENV = {
    **os.environ,
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "NO_COLOR": "1",
    "USER": "tester",
    "LOGNAME": "tester",
}
SPEC = """
name = "{name}"
app = "tests"
user = "tester"
model = "scripted:brains:{brain}"
goal = "Do the test thing."
instructions = "You are a test agent."
tools = ["brains:tick"]

[budgets]
max_turns = {max_turns}
max_wallclock = 60
{extra}
"""


def write_spec(
    directory: Path, name: str, brain: str, *, max_turns: int = 400, extra: str = ""
) -> Path:
    """Write ``<name>.toml`` in ``directory`` for the scripted model ``brains:<brain>``."""
    path = directory / f"{name}.toml"
    path.write_text(SPEC.format(name=name, brain=brain, max_turns=max_turns, extra=extra))
    return path


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    """An agent's directory holding the tests' tools module; the working directory of commands."""
    shutil.copy(BRAINS, tmp_path / "brains.py")
    return tmp_path


@pytest.fixture
def in_process(agent_dir: Path) -> Iterator[Path]:
    """The agent directory, with its ``brains`` module forgotten afterwards."""
    yield agent_dir
    sys.modules.pop("brains", None)
    if str(agent_dir.resolve()) in sys.path:
        sys.path.remove(str(agent_dir.resolve()))


def log_of(cwd: Path) -> DurableLog:
    """The (unopened) log the commands of ``cwd`` use: the store ``AUTONOMOUS_DB`` names in
    the commands' environment, else ``cwd``'s ./autonomous.db (never created here)."""
    named = ENV.get("AUTONOMOUS_DB")
    if named:
        return open_store(named)
    return SqliteEventLog(cwd / "autonomous.db", create=False)


def wait_until_due(cwd: Path, *, env: Mapping[str, str] | None = None, timeout: float = 10) -> None:
    """Wait until every deferred session of ``cwd``'s log is due: the wall clock has passed
    the latest wake time those sessions chose (read from the log, whose clock the commands
    share), checked every 20 ms, for ``timeout`` seconds at most. ``env``: the commands'
    extra environment (``AUTONOMOUS_DB`` names their store)."""
    named = (env or {}).get("AUTONOMOUS_DB")

    async def latest_wake() -> datetime | None:
        async with open_store(named) if named else log_of(cwd) as log:
            wakes = [
                s.next_wake_at
                for s in await log.sessions()
                if s.stop_reason == "deferred" and s.next_wake_at is not None
            ]
        return max(wakes, default=None)

    wake: datetime | None = anyio.run(latest_wake, backend="asyncio")
    assert wake is not None, "no session waits for a wake time"
    deadline = time.monotonic() + timeout
    while datetime.now(UTC) <= wake:
        assert time.monotonic() < deadline, f"still not due after {timeout} s: {wake}"
        time.sleep(0.02)


def session_events(cwd: Path, session: str) -> list[dict[str, Any]]:
    """The events of a session of ``cwd``'s log, read in-process (as ``show --json`` gives them)."""
    app, user, session_id = session.split("/") if "/" in session else ("tests", "tester", session)

    async def read() -> list[dict[str, Any]]:
        async with log_of(cwd) as log:
            return [event_to_dict(e) for e in await log.read(SessionKey(app, user, session_id))]

    events: list[dict[str, Any]] = anyio.run(read, backend="asyncio")
    return events


def key_of(session: str) -> SessionKey:
    """The key of ``app/user/session_id``, or of a bare id of the tests' app and user."""
    app, user, session_id = session.split("/") if "/" in session else ("tests", "tester", session)
    return SessionKey(app, user, session_id)


def append_events(
    cwd: Path,
    session: str,
    *payloads: Payload,
    author: str = "autonomous",
    at: datetime | None = None,
) -> None:
    """Append events with ``payloads`` to a session of ``cwd``'s log (created when there is
    none), in-process: what a run of some other code wrote, built by the test itself (``at``:
    their time, default now)."""

    async def write() -> None:
        named = ENV.get("AUTONOMOUS_DB")
        log = open_store(named) if named else SqliteEventLog(cwd / "autonomous.db")
        async with log:
            key = key_of(session)
            await log.append([Event.create(key, p, author=author, at=at) for p in payloads])

    anyio.run(write, backend="asyncio")


def hold(cwd: Path, session: str) -> str:
    """Take a session's lease for this (live) process, for a minute: to every command the
    session is running; returns the holder as ``ls`` shows it."""

    async def take() -> str:
        async with log_of(cwd) as log:
            lease = await log.acquire_lease(key_of(session), LeaseHolder.this_process(), 60)
            return str(lease.holder)

    holder: str = anyio.run(take, backend="asyncio")
    return holder


def holder_of(cwd: Path, session: str) -> str | None:
    """The live holder of a session's lease in ``cwd``'s log, read in-process."""

    async def read() -> str | None:
        async with log_of(cwd) as log:
            for summary in await log.sessions():
                if summary.key.session_id == session:
                    return summary.holder
        return None

    holder: str | None = anyio.run(read, backend="asyncio")
    return holder


def cli(
    cwd: Path,
    *args: str,
    timeout: float = 30,
    env: dict[str, str] | None = None,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the ``autonomous ARGS`` command in ``cwd`` (so ./autonomous.db is the log), with
    the environment ``ENV`` plus ``env``; its exit status and output as a subprocess's.

    It runs in this process (:func:`autonomous._cli._main.main`, what ``python -m autonomous``
    runs), which saves starting an interpreter for each command; in a subprocess
    (:func:`cli_process`) with ``process=True`` (a test of the process itself: its imports, its
    exit), where this process cannot (not its main thread, or an event loop runs here), and
    for an environment that acts at the interpreter's start (``PYTHON*``) or sets up
    OpenTelemetry (``OTEL_*``: a global provider). ``timeout`` bounds only a subprocess (the
    suite's own timeout bounds a command in this process).
    """
    if process or not _can_run_here(env or {}):
        return cli_process(cwd, *args, timeout=timeout, env=env)
    return _cli_here(cwd, args, {**ENV, **(env or {})})


def cli_process(
    cwd: Path, *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m autonomous ARGS`` in ``cwd`` in a subprocess (``timeout``: killed after)."""
    return subprocess.run(
        [sys.executable, "-m", "autonomous", *args],
        cwd=cwd,
        env={**ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _can_run_here(env: Mapping[str, str]) -> bool:
    """Whether a command can run in this process: on its main thread (the command installs
    signal handlers), outside an event loop (it runs its own), and for an environment whose
    effects end with the command."""
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return False
    return not any(name.startswith(("PYTHON", "OTEL_")) for name in env)


def _cli_here(
    cwd: Path, args: tuple[str, ...], environment: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run the command in this process, as :func:`cli` describes: in ``cwd`` with
    ``environment``, standard input empty, standard output and error captured; the working
    directory, environment, logging set-up, ``sys.path`` and the agents' modules put back."""
    out, err = io.StringIO(), io.StringIO()
    saved_cwd, saved_environ = os.getcwd(), dict(os.environ)
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    configure = _main.configure_logging

    def configure_uncached(verbose: int, as_json: bool) -> None:
        # The command caches each module's logger (with its stream) on first use: in a
        # process that runs many commands the next one would log to this one's stream.
        configure(verbose, as_json)
        structlog.configure(cache_logger_on_first_use=False)

    _set_environ(environment)
    os.chdir(cwd)
    _main.configure_logging = configure_uncached
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            _empty_stdin(),
        ):
            code = _exit_code(args)
    finally:
        _main.configure_logging = configure
        structlog.reset_defaults()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        os.chdir(saved_cwd)
        _set_environ(saved_environ)
        sys.path[:] = saved_path
        _forget_agent_modules(saved_modules)
    command = [sys.executable, "-m", "autonomous", *args]
    return subprocess.CompletedProcess(command, code, out.getvalue(), err.getvalue())


def _exit_code(args: tuple[str, ...]) -> int:
    """What ``main(args)`` returns; for a ``SystemExit`` (argparse's usage errors,
    ``--version``) and an uncaught exception, the status the interpreter would exit with."""
    try:
        return _main.main(list(args))
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1


def _set_environ(environment: Mapping[str, str]) -> None:
    """Make ``os.environ`` exactly ``environment`` (the local time zone follows ``TZ``)."""
    zone = os.environ.get("TZ")
    os.environ.clear()
    os.environ.update(environment)
    if os.environ.get("TZ") != zone:
        time.tzset()


@contextlib.contextmanager
def _empty_stdin() -> Iterator[None]:
    """Standard input empty and not a terminal, as a subprocess's under the suite."""
    saved = sys.stdin
    sys.stdin = io.StringIO()
    try:
        yield
    finally:
        sys.stdin = saved


def _forget_agent_modules(before: set[str]) -> None:
    """Forget the modules the command imported from outside the interpreter and this project
    (the agents' tools and scripted models): another test's agent directory has its own
    module of the same name."""
    kept = (Path(sys.prefix), Path(sys.base_prefix), Path(__file__).parents[2])
    for name in set(sys.modules) - before:
        origin = getattr(sys.modules[name], "__file__", None)
        if origin is not None and not any(Path(origin).resolve().is_relative_to(k) for k in kept):
            del sys.modules[name]


class Background:
    """A command running in a subprocess, its output lines collected as they arrive."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autonomous", *args],
            cwd=cwd,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(name, stream), daemon=True)
            for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, name: str, stream: Any) -> None:
        for line in stream:
            with self._changed:
                self.lines[name].append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, pattern: str, *, stream: str = "stderr", timeout: float = 10) -> str:
        """The first line of ``stream`` matching ``pattern``; fails after ``timeout`` seconds."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[stream]:
                    if regex.search(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._alive()):
                    raise AssertionError(
                        f"no line matching {pattern!r} on {stream} within {timeout} s; "
                        f"got {self.lines}"
                    )
                self._changed.wait(min(left, 0.1))

    def count(self, pattern: str, *, stream: str = "stderr") -> int:
        """How many lines of ``stream`` match ``pattern`` so far."""
        regex = re.compile(pattern)
        with self._changed:
            return sum(1 for line in self.lines[stream] if regex.search(line))

    def _alive(self) -> bool:
        return any(reader.is_alive() for reader in self._readers)

    def finish(self, timeout: float = 15) -> int:
        """Wait for the exit (and the last output); returns the exit status."""
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None and not any(r.is_alive() for r in self._readers):
                stream.close()  # read to the end; an open pipe would warn when collected
        return code

    def stdout(self) -> str:
        """Everything printed on standard output so far."""
        with self._changed:
            return "\n".join(self.lines["stdout"])

    def kill(self) -> None:
        """SIGKILL the process (if it still runs) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.finish()


@pytest.fixture
def start() -> Iterator[Callable[..., Background]]:
    """``start(cwd, *args)`` runs a command in the background; it is killed at the end if alive."""
    started: list[Background] = []

    def begin(cwd: Path, *args: str) -> Background:
        command = Background(cwd, *args)
        started.append(command)
        return command

    yield begin
    for command in started:
        command.kill()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def cli_store(
    request: pytest.FixtureRequest, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> DurableStore:
    """The store every command of the test uses, as an operator would choose it: SQLite, the
    default ./autonomous.db of the agent directory; or PostgreSQL, a fresh schema (``pg_dsn``)
    named by ``AUTONOMOUS_DB`` in the environment of every command (and of the in-process
    reads above). A test that takes it runs once on each store."""
    if request.param == "sqlite":
        monkeypatch.delitem(ENV, "AUTONOMOUS_DB", raising=False)
        return DurableStore("sqlite", str(agent_dir / "autonomous.db"))
    dsn = request.getfixturevalue("pg_dsn")
    monkeypatch.setitem(ENV, "AUTONOMOUS_DB", dsn)
    return DurableStore("postgres", dsn)
