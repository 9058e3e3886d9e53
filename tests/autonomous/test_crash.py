"""Crash safety: a durable run in a child process, killed with SIGKILL at random points, resumed;
on each durable store (the child opens the same store from its path or URL)."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from autonomous import send_inject
from eventlog import (
    AssistantMessage,
    Checkpoint,
    Event,
    InboxDelivered,
    SessionKey,
)

from .stores import DurableStore

CHILD = Path(__file__).with_name("crash_child.py")
KEY = SessionKey("crash", "test", "s")
KILLS = 50


_children: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_child_outlives_its_test() -> Iterator[None]:
    """Kill what a failed test left running: a child resuming forever would eat a core."""
    yield
    while _children:
        child = _children.pop()
        if child.poll() is None:
            child.kill()
            child.wait()


def start(durable: DurableStore, *extra: str) -> subprocess.Popen[str]:
    """A child process running (or resuming) the session on ``durable``."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), durable.target, KEY.session_id, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    _children.append(child)
    return child


async def events_of(durable: DurableStore) -> list[Event]:
    """Every event of the session, read through a log of our own (closed again at once)."""
    async with durable.open() as log:
        return await log.read(KEY)


async def observe(durable: DurableStore) -> tuple[list[Checkpoint], list[str], int]:
    """Checkpoints in order, delivered inbox ids, and tokens spent by every model call."""
    events = await events_of(durable)
    cps = [e.payload for e in events if isinstance(e.payload, Checkpoint)]
    delivered = [
        i for e in events if isinstance(e.payload, InboxDelivered) for i in e.payload.message_ids
    ]
    spent = sum(e.payload.input_tokens for e in events if isinstance(e.payload, AssistantMessage))
    return cps, delivered, spent


def check_invariants(cps: list[Checkpoint], delivered: list[str]) -> None:
    """Totals never go backwards, completed turns are never lost or repeated, one completion."""
    ok = [c for c in cps if not c.turn_failed and c.stop_reason in (None, "completed")]
    assert all(a.turns < b.turns for a, b in itertools.pairwise(ok)), [c.turns for c in ok]
    for a, b in itertools.pairwise(cps):
        assert (a.turns, a.input_tokens, a.cost_usd) <= (b.turns, b.input_tokens, b.cost_usd)
    assert sum(1 for c in cps if c.stop_reason == "completed") <= 1
    assert len(delivered) == len(set(delivered)), "an inject was delivered twice"


@pytest.mark.anyio
# Fifty child processes, each importing the library before it is killed: on a loaded 2-core
# machine that alone can pass the suite's 120 s hang guard, which is for hangs, not for this.
@pytest.mark.timeout(600)
async def test_sigkill_at_random_points_then_resume(durable: DurableStore) -> None:
    """50 kills across model calls, tool calls, checkpoint writes and injects lose nothing."""
    rng = random.Random(20261130)
    acked: list[str] = []
    kills = 0
    while kills < KILLS:
        child = start(durable, "--turns", "1000")
        assert child.stdout is not None
        await anyio.to_thread.run_sync(child.stdout.readline)  # imports done, log open
        if rng.random() < 0.5:  # an inject while the child runs: kill before or after it lands
            acked.append(await send_inject(_log_on(durable), KEY, f"note {kills}"))
        await anyio.sleep(rng.uniform(0.0, 0.4))
        child.send_signal(signal.SIGKILL)
        # Killed while running: it took the dead holder's lease at once (a refused resume
        # would have exited with 3, SessionLocked).
        assert -signal.SIGKILL == child.wait(), child.stderr.read() if child.stderr else ""
        child.communicate()  # closes its pipes
        kills += 1
        cps, delivered, _ = await observe(durable)
        check_invariants(cps, delivered)
    progressed, _, _ = await observe(durable)
    assert len(progressed) >= 5, "the kills must land mid-run, not only during start-up"
    # Finally let it finish: every acknowledged inject is delivered exactly once.
    child = start(durable, "--turns", "3")
    _, err = child.communicate(timeout=60)
    assert 0 == child.returncode, err
    cps, delivered, spent = await observe(durable)
    check_invariants(cps, delivered)
    assert "completed" == cps[-1].stop_reason
    assert sorted(acked) == sorted(set(acked) & set(delivered))
    assert spent == cps[-1].input_tokens  # every token spent is counted, crashed turns too


def _log_on(durable: DurableStore) -> Any:
    return _Opened(durable)


class _Opened:
    """send_inject needs a log; open one per call so the parent holds no connection."""

    def __init__(self, durable: DurableStore) -> None:
        self.durable = durable

    async def append(self, events: Any, **fence: Any) -> object:
        async with self.durable.open() as log:
            return await log.append(events, **fence)

    async def latest_checkpoint(self, key: SessionKey) -> object:
        async with self.durable.open() as log:
            return await log.latest_checkpoint(key)

    async def read(self, key: SessionKey, **options: Any) -> object:
        async with self.durable.open() as log:
            return await log.read(key, **options)


def test_two_resumers_in_two_processes_exactly_one_runs(durable: DurableStore) -> None:
    """Two processes resume one session at once: one runs, the other is refused."""
    first = start(durable, "--turns", "4", "--slow", "1.0")  # holds the session for >= 2 s
    time.sleep(0.05)
    second = start(durable, "--turns", "4", "--slow", "1.0")
    for child in (first, second):
        child.communicate(timeout=60)  # waits, and closes its pipes
    codes = sorted([first.returncode, second.returncode])
    assert [0, 3] == codes


async def _max_seq(durable: DurableStore) -> int:
    return max((e.seq for e in await events_of(durable)), default=0)


async def _holder(durable: DurableStore) -> str | None:
    """The session's live holder, as the store lists it (None once its lease expired)."""
    async with durable.open() as log:
        return next((s.holder for s in await log.sessions() if s.key == KEY), None)


async def _calls_made(durable: DurableStore) -> int:
    return sum(isinstance(e.payload, AssistantMessage) for e in await events_of(durable))


@pytest.mark.anyio
async def test_a_frozen_holder_writes_nothing_after_another_took_the_session_over(
    durable: DurableStore,
) -> None:
    """SIGSTOP a holder inside a tool call past its lease, let another process take the
    session over and finish it, then SIGCONT: the frozen holder's in-flight turn is never
    committed (its appends are fenced by the lease) and it ends lease_lost."""
    frozen = start(durable, "--turns", "50", "--slow", "2.0", "--ttl", "0.6")
    assert frozen.stdout is not None
    await anyio.to_thread.run_sync(frozen.stdout.readline)
    deadline = time.monotonic() + 30
    while await _calls_made(durable) == 0:  # its first model call asked for the tool, now running
        assert time.monotonic() < deadline, "the child never called the model"
        await anyio.sleep(0.02)
    frozen.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 30
        while await _holder(durable) is not None:  # till its lease expires (the store's clock)
            assert time.monotonic() < deadline, "the frozen holder's lease never expired"
            await anyio.sleep(0.02)
        taker = start(durable, "--turns", "2", "--ttl", "0.6")
        _, err = await anyio.to_thread.run_sync(partial(taker.communicate, timeout=60))
        assert 0 == taker.returncode, err
        after_takeover = await _max_seq(durable)
    finally:
        frozen.send_signal(signal.SIGCONT)
    out, err = await anyio.to_thread.run_sync(partial(frozen.communicate, timeout=60))
    assert 0 == frozen.returncode, err
    assert "lease_lost" in out
    assert after_takeover == await _max_seq(durable)
