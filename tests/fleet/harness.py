"""A fleet of ``autonomous daemon`` processes over one log, and what they left in it.

Shared by the fleet tests and ``bench/fleet.py`` (no pytest here). A log is named by its ``db``
text: a file path (SQLite) or a ``postgresql://`` DSN, exactly what ``--db`` takes. Sessions are
seeded by running the spec once (``autonomous run``, into a scratch SQLite file) and copying
that session's events under many keys with their wake times rewritten: each copy is what the
run would have left, without a process start per session.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import anyio
import attrs

import eventlog
from eventlog import Checkpoint, Event, EventKind, EventLog, SessionKey, SqliteEventLog

RUN = (sys.executable, "-m", "autonomous", "run")
BRAINS = Path(__file__).with_name("fleet_brains.py")
APP = "fleet"
USER = "tester"
#: The environment of every daemon: offline, no colour.
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1"}
SPEC = """
name = "{name}"
app = "{app}"
user = "{user}"
model = "scripted:fleet_brains:{brain}"
goal = "Do the test thing."
instructions = "You are a test agent."
tools = ["fleet_brains:gate"]

[budgets]
max_turns = 100
max_wallclock = 600

[scheduler]
kind = "exit"

[run]
lease_ttl = {lease_ttl}
control_poll = {control_poll}
"""


def write_agent(
    directory: Path,
    brain: str,
    *,
    name: str = "fleet",
    lease_ttl: float = 30,
    control_poll: float = 0.5,
) -> Path:
    """Put the brains module in ``directory`` and write ``<name>.toml`` for ``brain``."""
    (directory / BRAINS.name).write_text(BRAINS.read_text())
    path = directory / f"{name}.toml"
    path.write_text(
        SPEC.format(
            name=name,
            app=APP,
            user=USER,
            brain=brain,
            lease_ttl=lease_ttl,
            control_poll=control_poll,
        )
    )
    return path


def is_postgres(db: str) -> bool:
    """Whether ``db`` names a PostgreSQL server rather than a SQLite file."""
    return db.startswith(("postgresql://", "postgres://"))


def open_store(db: str) -> AbstractAsyncContextManager[EventLog]:
    """The event log ``db`` names (``async with`` it)."""
    if not is_postgres(db):
        return cast(AbstractAsyncContextManager[EventLog], SqliteEventLog(Path(db)))
    store = getattr(eventlog, "PostgresEventLog", None)
    if store is None:
        raise AssertionError("eventlog.PostgresEventLog is not on this branch yet")
    return cast(AbstractAsyncContextManager[EventLog], store(db))


def run_async(work: Callable[[], Any]) -> Any:
    """``anyio.run(work)`` on asyncio, from synchronous test code."""
    return anyio.run(work, backend="asyncio")


# ---- seeding ----------------------------------------------------------------------------


def template_events(agent_dir: Path, spec: Path, scratch: Path) -> list[Event]:
    """The events of one real run of ``spec`` (it defers), made in a scratch SQLite file."""
    db = scratch / "template.db"
    done = subprocess.run(
        [*RUN, str(spec), "--db", str(db), "--session", "template", "--json", "-q"],
        cwd=agent_dir,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 10, (done.returncode, done.stdout, done.stderr)  # Exit.DEFERRED
    assert '"reason": "deferred"' in done.stdout, (done.stdout, done.stderr)

    async def read() -> list[Event]:
        async with SqliteEventLog(db, create=False) as log:
            return await log.read(SessionKey(APP, USER, "template"))

    events: list[Event] = run_async(read)
    return events


def copy_session(template: Sequence[Event], key: SessionKey, wake: datetime) -> list[Event]:
    """The template's events under ``key``, its checkpoints due at ``wake``."""
    copied = []
    for event in template:
        payload = event.payload
        if isinstance(payload, Checkpoint):
            payload = attrs.evolve(payload, next_wake_at=wake, unseen_from=0)
        copied.append(Event.create(key, payload, author=event.author, at=event.at))
    return copied


def session_keys(count: int, prefix: str = "s") -> list[SessionKey]:
    """``count`` session keys of the fleet's app and user."""
    return [SessionKey(APP, USER, f"{prefix}{i:05d}") for i in range(count)]


def seed(db: str, template: Sequence[Event], wakes: Mapping[SessionKey, datetime]) -> None:
    """Append a copy of ``template`` per session of ``wakes``, due at its wake time (batched)."""

    async def write() -> None:
        async with open_store(db) as log:
            batch: list[Event] = []
            for key, wake in wakes.items():
                batch += copy_session(template, key, wake)
                if len(batch) >= 1000:
                    await log.append(batch)
                    batch = []
            await log.append(batch)

    run_async(write)


# ---- reading back -----------------------------------------------------------------------


def histories(db: str, keys: Iterable[SessionKey]) -> dict[SessionKey, list[Event]]:
    """Every event of each session, oldest first."""

    async def read() -> dict[SessionKey, list[Event]]:
        async with open_store(db) as log:
            return {key: await log.read(key) for key in keys}

    found: dict[SessionKey, list[Event]] = run_async(read)
    return found


def stop_reasons(db: str) -> dict[SessionKey, str | None]:
    """Each session's latest stop reason, as ``ls`` shows it."""

    async def read() -> dict[SessionKey, str | None]:
        async with open_store(db) as log:
            return {s.key: s.stop_reason for s in await log.sessions()}

    found: dict[SessionKey, str | None] = run_async(read)
    return found


def holders(db: str) -> dict[SessionKey, str]:
    """The holder (``host:pid:token``) of each session a lease is on."""

    async def read() -> dict[SessionKey, str]:
        async with open_store(db) as log:
            return {s.key: s.holder for s in await log.sessions() if s.holder}

    found: dict[SessionKey, str] = run_async(read)
    return found


def wait_until(what: str, check: Callable[[], bool], *, timeout: float, every: float = 0.2) -> None:
    """Poll ``check`` until it holds; an AssertionError naming ``what`` after ``timeout`` s
    (a guard against a hang, not a timed assertion: the tests assert counts and order)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not so after {timeout} s")
        time.sleep(every)


def wait_completed(db: str, keys: Sequence[SessionKey], *, timeout: float) -> None:
    """Wait until every session of ``keys`` has completed."""
    wanted = set(keys)

    def all_done() -> bool:
        reasons = stop_reasons(db)
        return all(reasons.get(key) == "completed" for key in wanted)

    wait_until(f"{len(wanted)} sessions completed", all_done, timeout=timeout, every=0.5)


@attrs.frozen
class Wakes:
    """What one session's log says about its wakes.

    ``started``: the turn number of each turn's prompt, in log order (a turn started twice,
    would show twice). ``checkpointed``: the
    turn of each stop checkpoint (deferred or completed), in log order. ``lags``: for each wake,
    the start of its turn minus the wake time it was due at, in seconds.
    """

    key: SessionKey
    started: tuple[int, ...]
    checkpointed: tuple[int, ...]
    stops: tuple[str, ...]
    lags: tuple[float, ...]


def wakes_of(key: SessionKey, events: Sequence[Event]) -> Wakes:
    """Read one session's wakes out of its events."""
    started: list[int] = []
    checkpointed: list[int] = []
    stops: list[str] = []
    lags: list[float] = []
    due: datetime | None = None
    for event in events:
        p = event.payload
        if event.kind is EventKind.USER_MESSAGE:
            started.append(getattr(p, "turn", 0))
            if due is not None:
                lags.append((event.at - due).total_seconds())
                due = None
        elif isinstance(p, Checkpoint) and p.stop_reason is not None and not p.turn_failed:
            checkpointed.append(p.turns)
            stops.append(p.stop_reason)
            due = p.next_wake_at if p.stop_reason == "deferred" else None
    return Wakes(key, tuple(started), tuple(checkpointed), tuple(stops), tuple(lags))


def wake_problems(found: Iterable[Wakes], wakes: int) -> list[str]:
    """What is wrong with sessions that should each have woken ``wakes`` times, once each.

    Each must have started turns 1..wakes+1 in order, each once (a run resumed after a crash
    goes on with the turn it found begun, it does not start it again), written one stop
    checkpoint per turn (deferred, then completed last), and started no wake's turn before
    its wake time.
    """
    turns = tuple(range(1, wakes + 2))
    stops = ("deferred",) * wakes + ("completed",)
    problems = []
    for w in found:
        if w.started != turns:
            problems.append(f"{w.key}: turns started {w.started}, wanted {turns}")
        if w.checkpointed != turns or w.stops != stops:
            problems.append(
                f"{w.key}: stop checkpoints {list(zip(w.checkpointed, w.stops, strict=False))}"
            )
        if any(lag < 0 for lag in w.lags):
            problems.append(f"{w.key}: a wake's turn started before its time: lags {w.lags}")
    return problems


def duplicates_and_missed(found: Iterable[Wakes], wakes: int) -> tuple[int, int]:
    """How many wakes ran more than once (extra runs), and how many never ran."""
    extra = missed = 0
    for w in found:
        for turn in range(2, wakes + 2):
            ran = w.checkpointed.count(turn)
            extra += max(ran - 1, 0)
            missed += ran == 0
    return extra, missed


# ---- daemon processes -------------------------------------------------------------------


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


_BY = re.compile(r"\bby (\S+:\d+)")


def writer_of(event: Event) -> str | None:
    """Which process (``host:pid``) wrote a model answer or a tool result of the brains (their
    text says ``by host:pid``); None for other events."""
    p = event.payload
    text = getattr(p, "text", None) if event.kind is EventKind.ASSISTANT_MESSAGE else None
    if event.kind is EventKind.TOOL_RESULT:
        text = getattr(p, "content", None)
    match = _BY.search(text) if isinstance(text, str) else None
    return match.group(1) if match else None


def in_gate(events: Sequence[Event], who: str) -> bool:
    """Whether ``who`` (``host:pid``) asked for the gate in the session's latest turn and has
    not written its result: it is mid-run, waiting in the tool."""
    asked = False
    for event in events:
        if event.kind is EventKind.USER_MESSAGE:
            asked = False
        elif event.kind is EventKind.ASSISTANT_MESSAGE and writer_of(event) == who:
            calls = getattr(event.payload, "tool_calls", ())
            asked = asked or any(c.name == "gate" for c in calls)
        elif event.kind is EventKind.TOOL_RESULT and getattr(event.payload, "name", "") == "gate":
            asked = False
    return asked


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
