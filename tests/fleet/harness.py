"""A fleet of ``autonomous daemon`` processes over one log, and what they left in it.

Shared by the fleet tests and ``bench/fleet.py`` (no pytest here). A log is named by its ``db``
text: a file path (SQLite) or a ``postgresql://`` DSN, exactly what ``--db`` takes. Sessions are
seeded by running the spec once (``autonomous run``, into a scratch SQLite file) and copying
that session's events under many keys with their wake times rewritten: each copy is what the
run would have left, without a process start per session.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import anyio
import attrs

import eventlog
from eventlog import Checkpoint, Event, EventKind, EventLog, SessionKey, SqliteEventLog, utcnow

from .daemons import ENV, Daemon, Fleet, lease_options

RUN = (sys.executable, "-m", "autonomous", "run")
BRAINS = Path(__file__).with_name("fleet_brains.py")
APP = "fleet"
USER = "tester"
SPEC = """
name = "{name}"
app = "{app}"
user = "{user}"
model = "scripted:fleet_brains:{brain}"
goal = "Do the test thing."
instructions = "You are a test agent."
tools = ["fleet_brains:gate"]

[budgets]
max_turns = {max_turns}
max_wallclock = 600

[scheduler]
kind = "{scheduler}"

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
    scheduler: str = "exit",
    max_turns: int = 100,
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
            scheduler=scheduler,
            max_turns=max_turns,
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


def seed(
    db: str,
    template: Sequence[Event],
    wakes: Mapping[SessionKey, datetime],
    *,
    concurrency: int = 1,
) -> None:
    """Append a copy of ``template`` per session of ``wakes``, due at its wake time, in batches
    of about a thousand events, ``concurrency`` appends at a time."""
    per_batch = max(1000 // max(len(template), 1), 1)
    keys = list(wakes)
    batches = [keys[i : i + per_batch] for i in range(0, len(keys), per_batch)]

    async def write() -> None:
        async with open_store(db) as log:

            async def appender(mine: list[list[SessionKey]]) -> None:
                for batch in mine:
                    await log.append(
                        [e for k in batch for e in copy_session(template, k, wakes[k])]
                    )

            async with anyio.create_task_group() as tg:
                for n in range(concurrency):
                    tg.start_soon(appender, batches[n::concurrency])

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


def wake_writers(events: Sequence[Event]) -> list[str | None]:
    """Who wrote each model answer of the wake turns (turn 2 on), in log order."""
    return [
        writer_of(e)
        for e in events
        if e.kind is EventKind.ASSISTANT_MESSAGE and getattr(e.payload, "turn", 0) >= 2
    ]


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


# ---- gated sessions: daemons caught mid-run ------------------------------------------

#: Leases short enough that a takeover after expiry comes within the test.
LEASE_TTL = 2.0


def gated_sessions(agent_dir: Path, tmp_path: Path, db: str, count: int) -> list[SessionKey]:
    """``count`` sessions of the gated brain, due within the next second: each one's wake turn
    waits in the ``gate`` tool until the test creates the gate file."""
    spec = write_agent(agent_dir, "gated", lease_ttl=LEASE_TTL, control_poll=0.2)
    template = template_events(agent_dir, spec, tmp_path)
    keys = session_keys(count)
    soon = utcnow() + timedelta(seconds=0.5)
    seed(db, template, {k: soon + timedelta(seconds=i / count) for i, k in enumerate(keys)})
    return keys


def wait_in_gate(db: str, daemon: Daemon, keys: list[SessionKey], count: int) -> list[SessionKey]:
    """Wait until ``daemon`` is mid-run, in the gate tool, on ``count`` of ``keys``; those."""
    inside: list[SessionKey] = []

    def enough() -> bool:
        inside[:] = [k for k, e in histories(db, keys).items() if in_gate(e, daemon.identity)]
        return len(inside) >= count

    wait_until(f"{daemon.name} in the gate of {count} sessions", enough, timeout=30)
    return inside


def start(fleet: Fleet, name: str, slots: int, **how: Any) -> Daemon:
    """A daemon with ``slots`` runs at once and the short leases (``how``: more of
    :meth:`Fleet.start`'s options)."""
    options = lease_options(LEASE_TTL)
    return fleet.start(name, poll=0.2, max_concurrent=slots, options=options, **how)
